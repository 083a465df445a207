"""The providers mailout sends through (:data:`PROVIDERS`, one line each) and their
URLs: ``resend://KEY``, ``postmark://TOKEN``, ``mailgun://KEY@DOMAIN``...

Parses a provider URL into what :class:`~mailout.transports.http.HttpTransport`
needs. What every provider shares is checked here, before the provider's module is
imported: the query parameters it takes, ``endpoint`` (an https URL, or http on
loopback only, for tests and local fakes) and ``timeout`` (seconds for one request).
The rest is the provider module's ``from_url``: the key (and Postmark's ``stream``,
Mailgun's domain and ``region``, SES's credentials and ``region``). Secrets are
percent-decoded (a ``/`` in an AWS secret is written ``%2F``) and never appear in
:attr:`Parsed.shown`. A provider whose extra is not installed is a ConfigError that
names it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol
from urllib.parse import parse_qsl, unquote, urlsplit

from mailout.exceptions import ConfigError
from mailout.support import envparse
from mailout.support.hosts import is_loopback
from mailout.transports.presets import Relay

if TYPE_CHECKING:
    from mailout.transports.http import Provider

DEFAULT_TIMEOUT: Final = 30.0
_COMMON: Final = frozenset({"endpoint", "timeout"})


@dataclass(frozen=True, slots=True)
class Registered:
    """One provider mailout sends through. Its transport is the module named after it,
    ``mailout.transports.NAME``, whose ``from_url`` reads ``NAME://`` URLs."""

    query: frozenset[str] = frozenset()  # its own URL parameters, beyond endpoint and timeout
    relay: Relay | None = None  # its SMTP relay, for smtp+NAME:// (None: it has none)
    extra: str = "http"  # the mailout extra its transport needs installed


# The providers: a new one is one line here, plus its module (docs/ADDING_A_PROVIDER.md).
PROVIDERS: Final[Mapping[str, Registered]] = {
    "resend": Registered(relay=Relay("smtp.resend.com", "Resend-Idempotency-Key", 24 * 3600.0)),
    "postmark": Registered(frozenset({"stream"}), Relay("smtp.postmarkapp.com")),
    "sendgrid": Registered(relay=Relay("smtp.sendgrid.net")),
    "brevo": Registered(relay=Relay("smtp-relay.brevo.com")),
    "mailgun": Registered(frozenset({"region"}), Relay("smtp.mailgun.org")),
    # SES's relay host is per region (email-smtp.REGION.amazonaws.com): none by default.
    "ses": Registered(frozenset({"region"}), Relay(None), extra="ses"),
}
SCHEMES: Final = tuple(PROVIDERS)
RELAYS: Final[Mapping[str, Relay]] = {
    name: p.relay for name, p in PROVIDERS.items() if p.relay is not None}


@dataclass(frozen=True)
class ProviderUrl:
    """What a provider module reads from its URL: how to show it, where its API is, and
    how to build its :class:`~mailout.transports.http.Provider` hooks."""

    shown: str  # the URL without secrets (``resend://****``)
    endpoint: str  # the API's default base URL
    provider: Callable[[], Provider] = field(repr=False)


@dataclass(frozen=True)
class Parsed:
    """A provider URL, checked."""

    name: str
    shown: str  # the URL without secrets
    endpoint: str
    timeout: float
    provider: Callable[[], Provider] = field(repr=False)


class FromUrl(Protocol):
    """The function each provider module offers as ``from_url``."""

    def __call__(self, address: str, query: Mapping[str, str], setting: str) -> ProviderUrl:
        """``address`` is the URL's host part as written (keys are case-sensitive)."""
        ...


def parse(url: str, scheme: str, setting: str) -> Parsed:
    """Check ``url`` (whose scheme is one of SCHEMES). Raises ConfigError naming ``setting``."""
    registered = PROVIDERS[scheme]
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    allowed = _COMMON | registered.query
    for key in query:
        if key not in allowed:
            raise ConfigError(setting, f"has an unknown parameter {key!r} for {scheme}:// "
                                       f"(known: {', '.join(sorted(allowed))})")
    timeout = _timeout(query.get("timeout"), setting)
    endpoint = query.get("endpoint")
    if endpoint is not None:
        endpoint = _endpoint(endpoint, setting)
    shown_tail = f" (endpoint {endpoint})" if endpoint else ""
    try:
        module = importlib.import_module(f"mailout.transports.{scheme}")
    except ModuleNotFoundError as exc:
        if (exc.name or "mailout").startswith("mailout"):
            raise
        raise ConfigError(setting, f"{scheme}:// needs {exc.name}: pip install "
                                   f"'mailout[{registered.extra}]'") from None
    from_url: FromUrl = module.from_url
    # The netloc, not hostname: hostname lowercases, and keys are case-sensitive.
    read = from_url(parts.netloc, query, setting)
    return Parsed(scheme, read.shown + shown_tail, endpoint or read.endpoint, timeout,
                  read.provider)


def api_key(address: str, scheme: str, setting: str) -> str:
    """The key of a ``NAME://KEY`` URL, percent-decoded; ConfigError when there is none."""
    key = unquote(address)
    if not key:
        raise ConfigError(setting, f"{scheme}:// needs the API key: {scheme}://KEY")
    return key


_SECONDS = envparse.seconds


def _timeout(raw: str | None, setting: str) -> float:
    """The ``?timeout=`` seconds (envparse's rules and wording, as every numeric setting)."""
    if raw is None:
        return DEFAULT_TIMEOUT
    try:
        value: float = _SECONDS("?timeout", raw)
    except ConfigError as exc:
        raise ConfigError(setting, f"?timeout {exc.reason}") from None
    return value


def _endpoint(raw: str, setting: str) -> str:
    """An https URL; plain http only to a loopback address (a local fake, a test)."""
    parts = urlsplit(raw)
    host = parts.hostname or ""
    if parts.scheme == "https" and host:
        return raw.rstrip("/")
    if parts.scheme == "http" and is_loopback(host):
        return raw.rstrip("/")
    raise ConfigError(setting, f"?endpoint must be an https:// URL (http:// only on loopback), "
                               f"got {raw!r}")


