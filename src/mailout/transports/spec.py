"""What a ``MAILOUT_TRANSPORT`` URL resolves to: a :class:`TransportSpec` (see ``url``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from mailout.transports.base import Transport

KEEP_HEADER: Final = "keep"  # TransportSpec.key_header: use MAILOUT_IDEMPOTENCY_HEADER


@dataclass(frozen=True)
class TransportSpec:
    """A transport chosen by URL: its name, its longest send, and how to build one."""

    name: str  # "smtp", "memory", "resend", "failover"...
    shown: str  # for logs and ``mailout check``: the URL without its secrets
    timeout: float  # the longest one send may take; the lease must be longer
    timeout_setting: str  # the setting that sets ``timeout``, for error messages
    build: Callable[[int], Transport] = field(repr=False)  # concurrency -> a transport
    # The mail header that carries the idempotency key: KEEP_HEADER for the
    # MAILOUT_IDEMPOTENCY_HEADER setting (plain SMTP, memory), a provider's own header
    # (smtp+resend: Resend-Idempotency-Key), or None to send none (a relay that
    # documents no such header, an HTTP API that takes the key natively).
    key_header: str | None = KEEP_HEADER
    members: tuple[TransportSpec, ...] = ()  # for failover() and roundrobin()
