"""Console settings: tokens, session signing, what the read-only role may see, and
what rendering a message needs (From address, templates, idempotency header).

Every setting has an environment variable; a bad value raises
:class:`~mailout.exceptions.ConfigError` naming it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mailout.exceptions import ConfigError
from mailout.web import sessions

# Names of environment variables, not secrets (hence the noqa).
TOKEN_ENV = "MAILOUT_WEB_TOKEN"  # noqa: S105
READONLY_TOKEN_ENV = "MAILOUT_WEB_READONLY_TOKEN"  # noqa: S105
SECRET_ENV = "MAILOUT_WEB_SECRET"  # noqa: S105
READONLY_RECIPIENTS_ENV = "MAILOUT_WEB_READONLY_RECIPIENTS"
SECURE_COOKIE_ENV = "MAILOUT_WEB_SECURE_COOKIE"
HOSTS_ENV = "MAILOUT_WEB_HOSTS"
# The names a browser on this machine uses. A DNS-rebinding page reaches the console
# under its own name (rebind.evil.example resolving to 127.0.0.1): refused by Host.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
MIN_TOKEN = 16  # characters: a token is the whole of the authentication
SESSION_SECONDS = 8 * 3600
# The worker's settings of the same names (see mailout.worker.config), read here without
# importing the worker's configuration (and with it every transport).
MAIL_FROM_ENV = "MAIL_FROM"
TEMPLATES_ENV = "MAILOUT_TEMPLATES"
IDEMPOTENCY_HEADER_ENV = "MAILOUT_IDEMPOTENCY_HEADER"


@dataclass(frozen=True)
class WebSettings:
    """What the console needs. Build it with :meth:`from_env` or directly.

    With neither token set, only an app built with ``anonymous=True`` (local
    development on loopback) or with a host ``authenticate`` hook lets anyone in.
    """

    token: str | None = field(default=None, repr=False)  # the admin role
    readonly_token: str | None = field(default=None, repr=False)
    secret: str | None = field(default=None, repr=False)  # signs session cookies
    readonly_sees_recipients: bool = False  # else masked, and no rendered content
    secure_cookie: bool = False  # mark the session cookie Secure (serve over HTTPS)
    session_seconds: int = SESSION_SECONDS
    templates_dir: Path | None = None
    mail_from: str | None = None  # the From of rendered messages; None: no rendering
    idempotency_header: str = "Idempotency-Key"
    # Host names the console answers to; MAILOUT_WEB_HOSTS adds the public name behind
    # a proxy. Not applied when a host app mounts the console with its own auth hook.
    hosts: tuple[str, ...] = LOOPBACK_HOSTS
    # Where the made secret and ended sessions are kept (MAILOUT_WEB_STATE_DIR);
    # None: ~/.local/state/mailout (see mailout.web.sessions).
    state_dir: Path | None = None

    def __post_init__(self) -> None:
        for env, value in ((TOKEN_ENV, self.token), (READONLY_TOKEN_ENV, self.readonly_token)):
            if value is not None and (len(value) < MIN_TOKEN or not value.isprintable()
                                      or value != value.strip()):
                raise ConfigError(env, f"must be at least {MIN_TOKEN} printable characters, "
                                       "without surrounding spaces")
            if value is not None and sessions.token_bits(value) < sessions.MIN_TOKEN_BITS:
                raise ConfigError(env, "is too easy to guess (too few different characters "
                                       "for its length): make one with python3 -c 'import "
                                       "secrets; print(secrets.token_urlsafe(24))'")
        if self.token is not None and self.token == self.readonly_token:
            raise ConfigError(READONLY_TOKEN_ENV, f"must differ from {TOKEN_ENV}")

    @property
    def has_tokens(self) -> bool:
        return self.token is not None or self.readonly_token is not None

    @property
    def state(self) -> Path:
        return self.state_dir or sessions.default_state_dir()

    def session_key(self) -> str:
        """The key that signs session cookies: ``MAILOUT_WEB_SECRET``, else a random one
        made once and kept in :attr:`state` (never one derived from the tokens: a
        cookie would then let anyone test token guesses offline)."""
        return self.secret or sessions.kept_secret(self.state)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WebSettings:
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            return env.get(name) or None

        templates = get(TEMPLATES_ENV) or "templates"
        return cls(
            token=get(TOKEN_ENV), readonly_token=get(READONLY_TOKEN_ENV), secret=get(SECRET_ENV),
            readonly_sees_recipients=_choice(env, READONLY_RECIPIENTS_ENV, "masked", "full"),
            secure_cookie=_choice(env, SECURE_COOKIE_ENV, "false", "true"),
            templates_dir=Path(templates),
            mail_from=get(MAIL_FROM_ENV),
            idempotency_header=get(IDEMPOTENCY_HEADER_ENV) or "Idempotency-Key",
            hosts=LOOPBACK_HOSTS + _host_names(env.get(HOSTS_ENV) or ""),
            state_dir=Path(state) if (state := get(sessions.STATE_DIR_ENV)) else None,
        )


def _choice(env: Mapping[str, str], name: str, default: str, other: str) -> bool:
    """True when ``name`` is ``other``; ``default`` or unset is False; else ConfigError."""
    value = (env.get(name) or default).strip().lower()
    if value not in (default, other):
        raise ConfigError(name, f"must be {default} or {other}, got {value!r}")
    return value == other


_HOST_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?|\[?[0-9a-f:.]+\]?")


def _host_names(raw: str) -> tuple[str, ...]:
    """``MAILOUT_WEB_HOSTS``: comma-separated host names (no ports, no wildcards)."""
    names = tuple(n.strip().lower().rstrip(".") for n in raw.split(",") if n.strip())
    for name in names:
        if not _HOST_NAME.fullmatch(name):
            raise ConfigError(HOSTS_ENV, f"{name!r} is not a host name (give names such as "
                                         "mail-admin.example.com, comma-separated, no port)")
    return tuple(n.strip("[]") for n in names)
