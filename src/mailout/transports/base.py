"""The transport contract: what a worker hands over, and what comes back.

A worker renders a claimed row into an :class:`Envelope` and calls
:meth:`Transport.send`. The transport speaks its provider's protocol (SMTP, an HTTP
API, memory) and maps whatever happened to one provider-neutral :class:`SendResult`:
a :class:`Decision`, a short reason label, the provider's id, and detail for the
attempt log. Nothing outside ``mailout.transports`` parses SMTP replies or HTTP
bodies.

A transport never raises for a delivery problem: a refused connection, a 5yz reply
or an HTTP 429 are results, not exceptions. It raises only for programming errors
and on cancellation.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from mailout.models import Attachment, Mailbox


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


@dataclass(frozen=True)
class Envelope:
    """A rendered message: its structured parts and, on demand, its wire form.

    Everything a provider API needs is here as fields, so an HTTP transport never
    parses MIME. ``wire`` is the full RFC 5322 message (CRLF line endings), built
    on first use by ``wire_builder`` and kept: SMTP pays for it, HTTP APIs that
    take fields never do. A transport that needs canonical line ends makes them,
    unless ``wire_crlf_only`` vouches for them. ``headers`` are the extra headers, in order, already
    checked by the renderer; they never include Bcc.
    """

    message_id: str  # with angle brackets, as in the Message-ID header
    idempotency_key: str
    sender: Mailbox  # the From header
    to: tuple[Mailbox, ...]
    subject: str
    text: str | None
    html: str | None
    cc: tuple[Mailbox, ...] = ()
    bcc: tuple[Mailbox, ...] = ()
    reply_to: tuple[Mailbox, ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    attachments: tuple[Attachment, ...] = ()
    return_path: str | None = None  # the envelope sender, when not the From address
    # When set, only these envelope recipients get this send: a retry of the recipients
    # a provider deferred, while those that accepted before are not sent it again. The
    # headers still name everyone (it is the same message). Empty means all.
    deliver_to: tuple[str, ...] = ()
    wire_builder: Callable[[], bytes] | None = field(default=None, repr=False, compare=False)
    # True when ``wire_builder`` guarantees CRLF line ends only, ending in one (mailout's
    # MIME builder does, by construction): the SMTP transport then writes the wire form
    # without scanning it three times to normalize them. False: any line ends.
    wire_crlf_only: bool = field(default=False, repr=False, compare=False)

    @property
    def mail_from(self) -> str:
        """The envelope sender (SMTP ``MAIL FROM``): the return path, else From's address."""
        return self.return_path or self.sender.address

    @property
    def recipients(self) -> tuple[str, ...]:
        """The envelope recipients of this send, bare addresses, first occurrence kept:
        ``deliver_to`` when set, else every address of to, cc and bcc."""
        if self.deliver_to:
            return self.deliver_to
        if not self.cc and not self.bcc and len(self.to) == 1:
            return (self.to[0].address,)  # the common case, without building a dict
        return tuple(dict.fromkeys(m.address for m in (*self.to, *self.cc, *self.bcc)))

    @cached_property
    def wire(self) -> bytes:
        """The RFC 5322 message. Raises ValueError when the envelope has no wire form."""
        if self.wire_builder is None:
            raise ValueError("this envelope was built without a wire form")
        return self.wire_builder()


@dataclass(frozen=True, slots=True)
class CheckResult:
    """What ``mailout check`` prints for one transport: ok or not, in one line."""

    ok: bool
    line: str  # human-readable, never holding a secret


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
