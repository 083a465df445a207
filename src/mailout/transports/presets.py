"""SMTP relay presets (``smtp+resend://`` and so on): the key header each relay honours.

mailout puts the row's idempotency key in a mail header. Over plain ``smtp://`` that
header (``MAILOUT_IDEMPOTENCY_HEADER``, default ``Idempotency-Key``) is informational:
no major provider documents deduplicating on it. A preset names the provider, so it
sends the header that provider documents (Resend's relay reads
``Resend-Idempotency-Key`` and keeps a key for 24 hours) and none where the provider
documents none. A preset with no host in the URL uses the provider's relay host.
Each provider's relay is on its line of :data:`mailout.transports.providers.PROVIDERS`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Relay:
    """What mailout knows about one provider's SMTP relay."""

    host: str | None  # the documented relay host (SES: per region, so none)
    key_header: str | None = None  # the idempotency header it honours, or None
    dedupe_window: float | None = None  # how long it drops a repeated key, in seconds
