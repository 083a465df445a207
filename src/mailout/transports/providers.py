"""HTTP provider URLs: ``resend://KEY``, ``postmark://TOKEN``, ``mailgun://KEY@DOMAIN``...

Parses a provider URL into what :class:`~mailout.transports.http.HttpTransport`
needs, without importing httpx (so a bad URL is reported at startup even where the
``http`` extra is missing). Secrets are percent-decoded (a ``/`` in an AWS secret is
written ``%2F``) and never appear in :attr:`Parsed.shown`.

Query parameters, for every provider: ``endpoint`` (an https URL, or http on
loopback only, for tests and local fakes) and ``timeout`` (seconds for one request).
Postmark also takes ``stream`` (its message stream); Mailgun ``region`` (``us`` or
``eu``); SES ``region`` instead of the host part.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final
from urllib.parse import parse_qsl, unquote, urlsplit

from mailout.exceptions import ConfigError
from mailout.support import envparse
from mailout.support.hosts import is_loopback

if TYPE_CHECKING:
    from mailout.transports.http import Provider

SCHEMES: Final = ("resend", "postmark", "sendgrid", "brevo", "mailgun", "ses")
DEFAULT_TIMEOUT: Final = 30.0
_MAILGUN_REGIONS: Final = {"us": "https://api.mailgun.net", "eu": "https://api.eu.mailgun.net"}
_COMMON: Final = frozenset({"endpoint", "timeout"})
_EXTRA: Final = {"postmark": {"stream"}, "mailgun": {"region"}, "ses": {"region"}}


@dataclass(frozen=True)
class Parsed:
    """A provider URL, checked."""

    name: str
    shown: str  # the URL without secrets
    endpoint: str
    timeout: float
    provider: Callable[[], Provider] = field(repr=False)


def parse(url: str, scheme: str, setting: str) -> Parsed:
    """Check ``url`` (whose scheme is one of SCHEMES). Raises ConfigError naming ``setting``."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    allowed = _COMMON | _EXTRA.get(scheme, set())
    for key in query:
        if key not in allowed:
            raise ConfigError(setting, f"has an unknown parameter {key!r} for {scheme}:// "
                                       f"(known: {', '.join(sorted(allowed))})")
    timeout = _timeout(query.get("timeout"), setting)
    endpoint = query.get("endpoint")
    if endpoint is not None:
        endpoint = _endpoint(endpoint, setting)
    shown_tail = f" (endpoint {endpoint})" if endpoint else ""
    # The netloc, not hostname: hostname lowercases, and keys are case-sensitive.
    netloc = parts.netloc
    if scheme == "mailgun":
        return _mailgun(netloc, query, endpoint, timeout, setting, shown_tail)
    if scheme == "ses":
        return _ses(netloc, query, endpoint, timeout, setting, shown_tail)
    secret = unquote(netloc)
    if not secret:
        raise ConfigError(setting, f"{scheme}:// needs the API key: {scheme}://KEY")
    if scheme == "resend":
        from mailout.transports import resend

        return Parsed("resend", f"resend://****{shown_tail}", endpoint or resend.DEFAULT_ENDPOINT,
                      timeout, lambda: resend.ResendProvider(secret))
    if scheme == "postmark":
        from mailout.transports import postmark

        stream = query.get("stream") or postmark.DEFAULT_STREAM
        return Parsed("postmark", f"postmark://****?stream={stream}{shown_tail}",
                      endpoint or postmark.DEFAULT_ENDPOINT, timeout,
                      lambda: postmark.PostmarkProvider(secret, stream=stream))
    if scheme == "sendgrid":
        from mailout.transports import sendgrid

        return Parsed("sendgrid", f"sendgrid://****{shown_tail}",
                      endpoint or sendgrid.DEFAULT_ENDPOINT, timeout,
                      lambda: sendgrid.SendGridProvider(secret))
    from mailout.transports import brevo

    return Parsed("brevo", f"brevo://****{shown_tail}", endpoint or brevo.DEFAULT_ENDPOINT,
                  timeout, lambda: brevo.BrevoProvider(secret))


def _mailgun(netloc: str, query: dict[str, str], endpoint: str | None, timeout: float,
             setting: str, tail: str) -> Parsed:
    from mailout.transports import mailgun

    key, at, domain = netloc.rpartition("@")
    if not at or not key or not domain:
        raise ConfigError(setting, "mailgun:// needs the key and the domain: "
                                   "mailgun://KEY@DOMAIN")
    region = query.get("region", "us").lower()
    if region not in _MAILGUN_REGIONS:
        raise ConfigError(setting, f"?region must be us or eu, got {region!r}")
    secret, domain = unquote(key), unquote(domain).lower()
    return Parsed("mailgun", f"mailgun://****@{domain}?region={region}{tail}",
                  endpoint or _MAILGUN_REGIONS[region], timeout,
                  lambda: mailgun.MailgunProvider(secret, domain))


def _ses(netloc: str, query: dict[str, str], endpoint: str | None, timeout: float,
         setting: str, tail: str) -> Parsed:
    from mailout.transports import ses

    creds, at, region = netloc.rpartition("@")
    access, colon, secret = creds.partition(":")
    region = unquote(query.get("region") or region)
    if not at or not colon or not access or not secret or not region:
        raise ConfigError(setting, "ses:// needs the access key, the secret and the region: "
                                   "ses://ACCESS:SECRET@REGION (a / in the secret as %2F)")
    access, secret = unquote(access), unquote(secret)
    return Parsed("ses", f"ses://{access}:****@{region}{tail}",
                  endpoint or f"https://email.{region}.amazonaws.com", timeout,
                  lambda: ses.SesProvider(access, secret, region))


_SECONDS = envparse.number(float, minimum=0, strict=True)


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


