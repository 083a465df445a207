"""The transport contract: what a worker hands over, and what comes back.

A worker renders a claimed row into an :class:`~mailout.message.envelope.Envelope`
and calls :meth:`Transport.send`. The transport speaks its provider's protocol
(SMTP, an HTTP API, memory) and maps whatever happened to one provider-neutral
:class:`SendResult`: a :class:`Decision`, a short reason label, the provider's id,
and detail for the attempt log. Nothing outside ``mailout.transports`` parses SMTP
replies or HTTP bodies.

A transport never raises for a delivery problem: a refused connection, a 5yz reply
or an HTTP 429 are results, not exceptions. It raises only for programming errors
and on cancellation.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from mailout.message.envelope import Envelope


class Decision(enum.StrEnum):
    """What one send means for the message, decided by the transport."""

    SENT = "sent"  # the provider took responsibility for the message
    RETRY = "retry"  # this message failed transiently (4yz, 429); charged, tried again later
    FAILED = "failed"  # refused for good (5yz to RCPT, a validation error); the reply is kept
    PAUSE = "pause"  # our configuration is wrong (credentials, TLS): uncharged, sending pauses
    OUTAGE = "outage"  # the provider is unreachable or refuses everyone: uncharged, breaker opens
    UNKNOWN = "unknown"  # the content left but no answer came back: it may have been accepted


@dataclass(frozen=True, slots=True)
class RecipientResult:
    """How one recipient fared, where the protocol says so per recipient.

    A transport lists the recipients whose fate differs or that it knows one by one
    (SMTP: each RCPT reply, when a message has several recipients); a recipient it
    does not list shares the message's decision.
    """

    address: str
    decision: Decision  # SENT, RETRY or FAILED
    code: int | None = None  # the reply or status code for this recipient
    enhanced: str | None = None  # RFC 3463 enhanced status code, where there is one
    text: str | None = None  # the provider's words, never a secret


@dataclass(frozen=True, slots=True)
class SendResult:
    """The provider-neutral result of one send.

    ``stage``, ``code``, ``enhanced`` and ``text`` are for the attempt log and for
    people: where in the exchange it ended (``"rcpt"``, ``"body"``, ``"http"``...),
    the SMTP reply code or HTTP status, and the provider's words. The worker acts on
    ``decision`` alone, plus ``retry_after`` when the provider asked for a delay.
    """

    decision: Decision
    reason: str  # a short machine-friendly label, used as a metrics label
    provider_id: str | None = None  # the provider's id for an accepted message
    stage: str | None = None
    code: int | None = None
    enhanced: str | None = None
    text: str | None = None
    detail: str | None = None  # a non-reply failure described, never a secret
    retry_after: float | None = None  # seconds the provider asked us to wait
    recipients: tuple[RecipientResult, ...] = ()
    transport: str | None = None  # which transport answered, when one stands for several
    # PAUSE or OUTAGE of the one failover member this send was pinned to (it may hold
    # an earlier copy): only this message waits for it; nothing else pauses.
    waits_for: str | None = None


@dataclass(frozen=True, slots=True)
class CheckResult:
    """What ``mailout check`` prints for one transport: ok or not, in one line."""

    ok: bool
    line: str  # human-readable, never holding a secret
    # Works, but something else will hurt (an EHLO name relays distrust): one line each.
    warnings: tuple[str, ...] = ()


class Transport(Protocol):
    """Something that hands envelopes to a provider.

    ``name`` names the transport in the attempt log and in metrics (``smtp``,
    ``memory``, ``resend``...). ``dedupe_window`` is how long, in seconds, the
    provider drops a second message carrying the same idempotency key (Resend: a
    day), or None when it documents no such deduplication: the worker resends a
    message whose earlier attempt is unknown without asking ``MAILOUT_ON_UNKNOWN``
    only inside that window.
    """

    name: str
    dedupe_window: float | None

    async def send(self, envelope: Envelope) -> SendResult:
        """Send one message. Reports delivery problems in the result, never raises them."""
        ...

    async def check(self) -> CheckResult:
        """Check the connection and credentials without sending anything (``mailout check``)."""
        ...

    async def close(self) -> None:
        """Close any open connections. Safe to call twice."""
        ...
