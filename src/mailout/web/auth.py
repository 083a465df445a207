"""Who is asking, and may they: tokens, sessions, roles and CSRF.

* ``Authorization: Bearer TOKEN`` with ``MAILOUT_WEB_TOKEN`` (admin) or
  ``MAILOUT_WEB_READONLY_TOKEN`` (read-only). For scripts; no cookie, so no CSRF
  token is needed: a browser never adds that header to a forged request.
* The login form: the same tokens plus a name for the audit log; the session is
  a signed cookie (HttpOnly, SameSite=Strict) that ends after 8 hours or when the
  token it was opened with changes.
* A host application's own auth, when the console is mounted: an
  ``authenticate(request) -> Identity | None`` hook replaces the tokens.
* ``anonymous``: everyone is admin. Only for local development; the CLI allows
  it on a loopback address only.

Every POST made with a cookie (or through a host's auth) must carry the session's
CSRF token in a ``csrf`` form field; an ``Origin`` header, when sent, must name
this host.
"""

from __future__ import annotations

import enum
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import Request

from mailout.web import sessions
from mailout.web.settings import WebSettings

CSRF_FIELD = "csrf"
_SESSION_KEYS = ("role", "name", "fp", "csrf", "sid")


class Role(enum.StrEnum):
    """What a signed-in person may do."""

    ADMIN = "admin"  # sees everything, acts (retry, cancel, resolve, pause, resume)
    READONLY = "readonly"  # sees every page, acts on nothing; recipients masked by default


class Via(enum.StrEnum):
    """How the identity was established (it decides whether CSRF applies)."""

    SESSION = "web"  # the login form's cookie
    BEARER = "api"  # an Authorization header
    HOST = "host"  # the host application's auth hook
    ANONYMOUS = "anonymous"  # auth disabled for local development


@dataclass(frozen=True, slots=True)
class Identity:
    """A person or script the console serves. ``sees_personal`` allows full recipient
    addresses and rendered content; otherwise they are masked or withheld."""

    name: str
    role: Role
    via: Via = Via.HOST
    sees_personal: bool = True

    @property
    def can_act(self) -> bool:
        return self.role is Role.ADMIN

    @property
    def actor(self) -> str:
        """How the audit log names this identity: ``Ann (web, admin)``."""
        return f"{self.name} ({self.via.value}, {self.role.value})"


Authenticate = Callable[[Request], "Identity | None"]


class Gate:
    """Decides the identity of a request from the settings (or a host hook)."""

    def __init__(self, settings: WebSettings, *, anonymous: bool = False,
                 authenticate: Authenticate | None = None) -> None:
        self.settings = settings
        self.anonymous = anonymous
        self.hook = authenticate
        # Only the token login needs a kept secret; a host hook or anonymous access
        # still signs the CSRF cookie, with a key that lives as long as the process.
        self.secret = settings.session_key() if self.uses_login or settings.secret \
            else secrets.token_urlsafe(32)
        self.revocations = sessions.Revocations(settings.state, settings.session_seconds)
        self.throttle = sessions.LoginThrottle()

    @property
    def uses_login(self) -> bool:
        """Whether the login form applies (not for a host hook or anonymous access)."""
        return self.hook is None and not self.anonymous

    def role_of(self, token: str) -> Role | None:
        """The role ``token`` grants, compared in constant time; None if neither."""
        found = None
        for role, expected in ((Role.ADMIN, self.settings.token),
                               (Role.READONLY, self.settings.readonly_token)):
            if expected is not None and hmac.compare_digest(token.encode(), expected.encode()):
                found = role
        return found

    def _token_for(self, role: Role) -> str | None:
        return self.settings.token if role is Role.ADMIN else self.settings.readonly_token

    def _sees(self, role: Role) -> bool:
        return role is Role.ADMIN or self.settings.readonly_sees_recipients

    def identify(self, request: Request) -> Identity | None:
        """The identity of ``request``, or None (answer 401). A wrong bearer token is
        None even if a valid session cookie came along."""
        if self.hook is not None:
            return self.hook(request)
        if self.anonymous:
            return Identity("local developer", Role.ADMIN, Via.ANONYMOUS)
        header = request.headers.get("authorization", "")
        if header:
            scheme, _, token = header.partition(" ")
            role = self.role_of(token.strip()) if scheme.lower() == "bearer" else None
            if role is None:
                return None
            # The audit names the token; a name the script gives is shown as its claim.
            claimed = request.headers.get("x-mailout-actor", "").strip()[:100]
            name = f'{role.value} token, says "{claimed}"' if claimed else f"{role.value} token"
            return Identity(name, role, Via.BEARER, self._sees(role))
        return self._from_session(request)

    def _from_session(self, request: Request) -> Identity | None:
        session = request.session
        try:
            role = Role(session.get("role", ""))
        except ValueError:
            return None
        token = self._token_for(role)
        # The session names the token it was opened with: rotating a token ends it.
        if token is None or not hmac.compare_digest(
                str(session.get("fp", "")), sessions.fingerprint(self.secret, token)):
            return None
        if self.revocations.revoked(str(session.get("sid", ""))):  # logged out
            return None
        return Identity(str(session.get("name") or "unnamed"), role, Via.SESSION,
                        self._sees(role))

    def log_in(self, request: Request, name: str, role: Role) -> None:
        """Open a session: a fresh CSRF token, so one seen before login is useless."""
        token = self._token_for(role)
        assert token is not None  # role_of() only grants roles that have a token
        request.session.clear()
        request.session.update({"role": role.value, "name": name,
                                "fp": sessions.fingerprint(self.secret, token),
                                "csrf": secrets.token_urlsafe(32),
                                "sid": secrets.token_urlsafe(16)})

    def log_out(self, request: Request) -> None:
        """End the session here and for every copy of its cookie."""
        sid = request.session.get("sid")
        if isinstance(sid, str) and sid:
            self.revocations.revoke(sid)
        for key in _SESSION_KEYS:
            request.session.pop(key, None)


def csrf_token(request: Request) -> str:
    """The session's CSRF token, made on first use (the login form needs one too)."""
    token = request.session.get("csrf")
    if not isinstance(token, str) or not token:
        token = secrets.token_urlsafe(32)
        request.session["csrf"] = token
    return token


def csrf_ok(request: Request, identity: Identity | None, submitted: object) -> bool:
    """Whether a POST passes CSRF checks: bearer requests are exempt; everything else
    needs the session's token, and a foreign ``Origin`` fails whatever the token."""
    origin = request.headers.get("origin")
    # "null" is what a sandboxed frame (a rendered e-mail, say) sends: never trusted.
    if origin and (origin == "null" or urlsplit(origin).netloc != request.headers.get("host")):
        return False
    if identity is not None and identity.via is Via.BEARER:
        return True
    expected = request.session.get("csrf")
    return (isinstance(expected, str) and isinstance(submitted, str) and bool(expected)
            and hmac.compare_digest(expected.encode(), submitted.encode()))

