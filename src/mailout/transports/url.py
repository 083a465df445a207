"""Choose a transport by URL: ``MAILOUT_TRANSPORT``.

===============================================  ========================================
``smtp://user:pass@host:587``                    SMTP, STARTTLS required (``smtp.settings``)
``smtps://user:pass@host:465``                   SMTP over implicit TLS
``smtp+resend://resend:KEY@smtp.resend.com``     a provider's SMTP relay: sets the key
                                                 header it honours (``presets``)
``resend://KEY``, ``mailgun://KEY@DOMAIN``...    a provider's HTTP API: one per line of
                                                 ``providers.PROVIDERS``; ``?endpoint=``
                                                 points it elsewhere, ``?timeout=``
                                                 bounds one request
``failover(A, B)``, ``roundrobin(A, B)``         several transports (``multi``)
``memory://``                                    keep messages in memory (tests)
unset                                            SMTP from the ``SMTP_*`` variables
===============================================  ========================================

:func:`parse` validates the URL at startup (ConfigError naming ``MAILOUT_TRANSPORT``)
and returns a :class:`TransportSpec` that builds one transport per lane, so each lane
has its own connections. Secrets in the URL never appear in ``repr`` or in
:attr:`TransportSpec.shown`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Final
from urllib.parse import urlsplit

from mailout.exceptions import ConfigError
from mailout.transports import providers
from mailout.transports.base import Transport
from mailout.transports.smtp import settings as smtp_settings
from mailout.transports.spec import KEEP_HEADER, TransportSpec

__all__ = ["KEEP_HEADER", "SETTING", "TransportSpec", "parse"]

SETTING: Final = "MAILOUT_TRANSPORT"
MEMORY_TIMEOUT: Final = 1.0  # a memory send takes no time; any lease is long enough


def parse(url: str | None, env: Mapping[str, str], *, concurrency: int) -> TransportSpec:
    """The transport ``url`` names (the ``SMTP_*`` variables when it is empty)."""
    if not url:
        return _smtp(smtp_settings.from_env(env, pool_size=concurrency), explicit_pool=env)
    url = url.strip()
    head = url.split("(", 1)[0].strip().lower()
    if "(" in url and head in ("failover", "roundrobin"):
        from mailout.transports import multi

        return multi.parse_spec(url, head, lambda u: parse(u, env, concurrency=concurrency))
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("smtp", "smtps"):
        parsed = smtp_settings.from_url(url, env, pool_size=concurrency, setting=SETTING)
        return _smtp(parsed, explicit_pool=env, from_url=url)
    if scheme.startswith(("smtp+", "smtps+")):
        return _preset(url, scheme, env, concurrency)
    if scheme in providers.SCHEMES:
        return _http(providers.parse(url, scheme, SETTING))
    if scheme == "memory":
        return TransportSpec("memory", "memory://", MEMORY_TIMEOUT, SETTING, _memory)
    raise ConfigError(SETTING, f"has an unknown scheme {scheme or '(none)'!r}: use smtp://, "
                               f"smtps://, smtp+PROVIDER://, {', '.join(providers.SCHEMES)}, "
                               "failover(...), roundrobin(...) or memory://")


def _smtp(settings: smtp_settings.SmtpSettings, *, explicit_pool: Mapping[str, str],
          from_url: str | None = None) -> TransportSpec:
    # Without SMTP_POOL_SIZE (or ?pool_size=), each lane opens as many connections as it
    # has concurrent sends.
    fixed_pool = bool(explicit_pool.get("SMTP_POOL_SIZE")) or (
        from_url is not None and "pool_size=" in urlsplit(from_url).query)

    def build(concurrency: int) -> Transport:
        from mailout.transports.smtp.client import SmtpTransport  # aiosmtplib only when sending

        pool = settings.pool_size if fixed_pool else concurrency
        return SmtpTransport(replace(settings, pool_size=pool))

    scheme = "smtps" if settings.tls is smtp_settings.TlsMode.IMPLICIT else "smtp"
    if settings.preset:
        scheme = settings.preset
    user = f"{settings.username}@" if settings.username else ""
    shown = f"{scheme}://{user}{settings.host}:{settings.port}"
    return TransportSpec(settings.preset or "smtp", shown, settings.timeout, "SMTP_TIMEOUT",
                         build)


def _preset(url: str, scheme: str, env: Mapping[str, str], concurrency: int) -> TransportSpec:
    base, _, provider = scheme.partition("+")
    preset = providers.RELAYS.get(provider)
    if preset is None:
        raise ConfigError(SETTING, f"has an unknown relay preset {scheme!r}: use one of "
                                   f"{', '.join('smtp+' + p for p in providers.RELAYS)}")
    plain = base + url[len(scheme):]
    if preset.host and urlsplit(plain).hostname is None:
        # No host given: the provider's documented relay.
        parts = urlsplit(plain)
        plain = f"{base}://{parts.netloc}{preset.host}{parts.path}" + (
            f"?{parts.query}" if parts.query else "")
    parsed = smtp_settings.from_url(plain, env, pool_size=concurrency, setting=SETTING)
    parsed = replace(parsed, preset=f"smtp+{provider}", dedupe_window=preset.dedupe_window)
    spec = _smtp(parsed, explicit_pool=env, from_url=plain)
    return replace(spec, key_header=preset.key_header)


def _http(parsed: providers.Parsed) -> TransportSpec:
    def build(concurrency: int) -> Transport:
        from mailout.transports.http import HttpTransport  # httpx only when sending

        return HttpTransport(parsed.provider(), parsed.endpoint, timeout=parsed.timeout,
                             concurrency=concurrency, shown=parsed.shown)

    return TransportSpec(parsed.name, parsed.shown, parsed.timeout, f"{SETTING} ?timeout=",
                         build, key_header=None)


def _memory(concurrency: int) -> Transport:
    from mailout.transports.memory import MemoryTransport

    return MemoryTransport()
