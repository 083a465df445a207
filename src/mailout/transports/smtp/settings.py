"""SMTP settings: where and how to connect, from ``SMTP_*`` variables or a URL.

``MAILOUT_TRANSPORT=smtp://user:pass@host:587`` (STARTTLS required),
``smtps://user:pass@host:465`` (implicit TLS) or, when ``MAILOUT_TRANSPORT`` is unset,
the ``SMTP_HOST``, ``SMTP_PORT``, ``SMTP_USER``, ``SMTP_PASS``, ``SMTP_TLS``,
``SMTP_TIMEOUT``, ``SMTP_CA_FILE``, ``SMTP_POOL_SIZE``, ``SMTP_PIPELINING``,
``SMTP_ALLOW_PLAINTEXT_AUTH`` and ``SMTP_EHLO`` variables. In a URL, the user and
password are percent-decoded and the other settings are query parameters named like
the variables without ``SMTP_``
(``?tls=none&timeout=10&pool_size=4&pipelining=false&ca_file=/path&ehlo=mx.example.com``);
a variable that is set fills in what the URL leaves out. Bad values raise ConfigError
naming the setting.

The EHLO name is the machine's fully qualified name unless ``SMTP_EHLO`` says
otherwise: relays penalise or refuse a name that is not one (``localhost``, a bare
host name), so ``mailout check`` warns about it (:func:`ehlo_warning`).
"""

from __future__ import annotations

import enum
import re
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, unquote, urlsplit

from mailout.exceptions import ConfigError
from mailout.support import envparse
from mailout.support.hosts import is_loopback

IMPLICIT_TLS_PORT: Final = 465
DEFAULT_PORT: Final = 587


class TlsMode(enum.StrEnum):
    """How the connection is protected."""

    STARTTLS = "starttls"  # plain connect, then a mandatory STARTTLS upgrade
    IMPLICIT = "implicit"  # TLS from the first byte (SMTPS, port 465)
    NONE = "none"  # no TLS at all: for local relays and tests


def default_tls_mode(port: int) -> TlsMode:
    """The usual TLS mode for a port: implicit on 465, STARTTLS elsewhere."""
    return TlsMode.IMPLICIT if port == IMPLICIT_TLS_PORT else TlsMode.STARTTLS


@dataclass(frozen=True)
class SmtpSettings:
    """Where and how to connect. ``password`` never shows in ``repr``."""

    host: str
    port: int = 587
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: TlsMode = TlsMode.STARTTLS
    timeout: float = 30.0
    ca_file: str | Path | None = None  # extra CA bundle to trust
    local_hostname: str | None = None  # the EHLO name; the machine's FQDN if None
    pool_size: int = 4
    pipelining: bool = True  # use PIPELINING when offered; False for a server that breaks it
    preset: str | None = None  # "smtp+resend"...: a provider's relay, see transports.presets
    dedupe_window: float | None = None  # seconds the relay drops a repeated key header
    # AUTH over a connection without TLS sends the password readably: refused unless
    # the host is loopback or this is set (a relay on a trusted private network).
    allow_plaintext_auth: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "tls", TlsMode(self.tls))
        if self.pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        if self.timeout <= 0:
            raise ValueError("timeout must be positive")


def cleartext_auth_refused(settings: SmtpSettings) -> bool:
    """True when AUTH would go without TLS to a host that is not loopback, and
    ``SMTP_ALLOW_PLAINTEXT_AUTH`` does not allow it."""
    return (settings.username is not None and settings.tls is TlsMode.NONE
            and not settings.allow_plaintext_auth and not is_loopback(settings.host))


def client_tls_context(settings: SmtpSettings) -> ssl.SSLContext:
    """A verifying client context that also trusts ``settings.ca_file``."""
    context = ssl.create_default_context()
    if settings.ca_file is not None:
        context.load_verify_locations(cafile=settings.ca_file)
    return context


_tls = envparse.choice(TlsMode)

# RFC 5321 section 4.1.2: EHLO takes a domain or an address literal ("[192.0.2.1]",
# "[IPv6:2001:db8::1]"). Anything else (a space, a control character) is refused.
_LABEL: Final = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DOMAIN: Final = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
_ADDRESS_LITERAL: Final = re.compile(r"\[(?:IPv6:[0-9A-Fa-f:.]+|[0-9.]+)\]")
# Top labels of names that are not global (RFC 6761, RFC 6762, common home routers').
_NOT_A_HOST: Final = ("localhost", "localdomain", "local", "internal", "lan", "home")
MAX_DOMAIN: Final = 253


def _ehlo(name: str, raw: str) -> str:
    value = raw.strip()
    if not (_DOMAIN.fullmatch(value) or _ADDRESS_LITERAL.fullmatch(value)) or len(value) > \
            MAX_DOMAIN:
        raise ConfigError(name, "must be a domain name (mail.example.com) or an address "
                                "literal ([192.0.2.1]) for EHLO")
    return value.rstrip(".")


def is_fqdn(name: str) -> bool:
    """A name other mail servers can take for this host's: two labels or more, a top
    label that is not a number, and not a name every machine has (``localhost``,
    ``*.localdomain``, ``*.local``)."""
    if not _DOMAIN.fullmatch(name) or len(name) > MAX_DOMAIN:
        return False
    labels = name.rstrip(".").lower().split(".")
    return (len(labels) >= 2 and not labels[-1].isdigit() and labels[-1] not in _NOT_A_HOST
            and labels[0] != "localhost")


def ehlo_name(settings: SmtpSettings) -> str:
    """The name EHLO will give: ``SMTP_EHLO``, else the machine's (``socket.getfqdn``,
    which may block on DNS: call it off the event loop)."""
    return settings.local_hostname or socket.getfqdn()


def ehlo_warning(name: str) -> str | None:
    """What ``mailout check`` says about ``name`` as the EHLO name; None when it is fine."""
    if is_fqdn(name):
        return None
    shown = name.encode("ascii", "backslashreplace").decode("ascii")[:80]
    return (f"the EHLO name {shown!r} is not a fully qualified domain name; relays may "
            "penalise or refuse it: set SMTP_EHLO (or ?ehlo= on the smtp:// URL) to this "
            "host's public name")


# setting -> (environment variable, URL query name, parser)
_VARIABLES: Final[dict[str, tuple[str, str, envparse.Parser]]] = {
    "host": ("SMTP_HOST", "host", envparse.text),
    "port": ("SMTP_PORT", "port", envparse.number(int, minimum=1)),
    "username": ("SMTP_USER", "user", envparse.text),
    "password": ("SMTP_PASS", "pass", envparse.text),
    "tls": ("SMTP_TLS", "tls", _tls),
    "timeout": ("SMTP_TIMEOUT", "timeout", envparse.seconds),
    "ca_file": ("SMTP_CA_FILE", "ca_file", envparse.text),
    "pool_size": ("SMTP_POOL_SIZE", "pool_size", envparse.number(int, minimum=1)),
    "pipelining": ("SMTP_PIPELINING", "pipelining", envparse.boolean),
    "allow_plaintext_auth": ("SMTP_ALLOW_PLAINTEXT_AUTH", "allow_plaintext_auth",
                             envparse.boolean),
    "local_hostname": ("SMTP_EHLO", "ehlo", _ehlo),
}
_QUERY_NAMES: Final = frozenset(v[1] for v in _VARIABLES.values()) - {"host", "port", "user",
                                                                     "pass"}


def from_env(env: Mapping[str, str], *, pool_size: int,
             given: Mapping[str, Any] | None = None) -> SmtpSettings:
    """Settings from ``given`` (already parsed, e.g. from a URL), then the ``SMTP_*``
    variables, then the defaults. ``pool_size`` applies when neither sets one."""
    values: dict[str, Any] = dict(given or {})
    for setting, (var, _, parse) in _VARIABLES.items():
        raw = env.get(var)
        if setting not in values and raw not in (None, ""):
            values[setting] = parse(var, raw)
    values.setdefault("host", "localhost")
    values.setdefault("port", DEFAULT_PORT)
    values.setdefault("tls", default_tls_mode(values["port"]))
    values.setdefault("pool_size", pool_size)
    return SmtpSettings(**values)


def from_url(url: str, env: Mapping[str, str], *, pool_size: int,
             setting: str = "MAILOUT_TRANSPORT") -> SmtpSettings:
    """Settings from an ``smtp://`` or ``smtps://`` URL (see the module docstring)."""
    parts = urlsplit(url)
    implicit = parts.scheme == "smtps"
    given: dict[str, Any] = {}
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(setting, "has a port that is not a number from 1 to 65535") from None
    if parts.hostname:
        given["host"] = parts.hostname
    if port is not None:
        given["port"] = port
    elif implicit:
        given["port"] = IMPLICIT_TLS_PORT
    if parts.username:
        given["username"] = unquote(parts.username)
    if parts.password is not None:
        given["password"] = unquote(parts.password)
    for key, raw in parse_qsl(parts.query, keep_blank_values=True):
        if key not in _QUERY_NAMES:
            known = ", ".join(sorted(_QUERY_NAMES))
            raise ConfigError(setting, f"has an unknown parameter {key!r} (known: {known})")
        name = next(s for s, v in _VARIABLES.items() if v[1] == key)
        given[name] = _VARIABLES[name][2](f"{setting} ?{key}", raw)
    if implicit:
        if given.get("tls", TlsMode.IMPLICIT) is not TlsMode.IMPLICIT:
            raise ConfigError(setting, "smtps:// means implicit TLS; use smtp:// with ?tls=")
        given["tls"] = TlsMode.IMPLICIT
    return from_env(env, pool_size=pool_size, given=given)
