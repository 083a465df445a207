"""Choose a transport by URL: ``MAILOUT_TRANSPORT``.

=============================================  ==========================================
``smtp://user:pass@host:587``                  SMTP, STARTTLS required (see ``smtp.settings``)
``smtps://user:pass@host:465``                 SMTP over implicit TLS
``memory://``                                  keep messages in memory (tests)
unset                                          SMTP from the ``SMTP_*`` variables
=============================================  ==========================================

:func:`parse` validates the URL at startup (ConfigError naming ``MAILOUT_TRANSPORT``)
and returns a :class:`TransportSpec` that builds one transport per lane, so each lane
has its own connections. Secrets in the URL never appear in ``repr`` or in
:attr:`TransportSpec.shown`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final
from urllib.parse import urlsplit

from mailout.exceptions import ConfigError
from mailout.transports.base import Transport
from mailout.transports.smtp import settings as smtp_settings

SETTING: Final = "MAILOUT_TRANSPORT"
MEMORY_TIMEOUT: Final = 1.0  # a memory send takes no time; any lease is long enough


@dataclass(frozen=True)
class TransportSpec:
    """A transport chosen by URL: its name, its longest send, and how to build one."""

    name: str  # "smtp", "memory"...
    shown: str  # for logs and ``mailout check``: the URL without its secrets
    timeout: float  # the longest one send may take; the lease must be longer
    timeout_setting: str  # the setting that sets ``timeout``, for error messages
    build: Callable[[int], Transport] = field(repr=False)  # concurrency -> a transport


def parse(url: str | None, env: Mapping[str, str], *, concurrency: int) -> TransportSpec:
    """The transport ``url`` names (the ``SMTP_*`` variables when it is empty)."""
    if not url:
        return _smtp(smtp_settings.from_env(env, pool_size=concurrency), explicit_pool=env)
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("smtp", "smtps"):
        parsed = smtp_settings.from_url(url, env, pool_size=concurrency, setting=SETTING)
        return _smtp(parsed, explicit_pool=env, from_url=url)
    if scheme == "memory":
        return TransportSpec("memory", "memory://", MEMORY_TIMEOUT, SETTING, _memory)
    raise ConfigError(SETTING, f"has an unknown scheme {scheme or url!r}: use smtp://, "
                               "smtps:// or memory://")


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
    user = f"{settings.username}@" if settings.username else ""
    shown = f"{scheme}://{user}{settings.host}:{settings.port}"
    return TransportSpec("smtp", shown, settings.timeout, "SMTP_TIMEOUT", build)


def _memory(concurrency: int) -> Transport:
    from mailout.transports.memory import MemoryTransport

    return MemoryTransport()
