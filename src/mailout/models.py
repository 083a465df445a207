"""Records and enums shared across modules. Plain values, no imports of mailout.

The one piece of I/O: an :class:`Attachment` built from a path or a file reads it.
"""

from __future__ import annotations

import enum
import mimetypes
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO


class Status(enum.StrEnum):
    """Lifecycle of an outbox row."""

    PENDING = "pending"  # waiting for its next_attempt_at; may have failed transiently before
    SENDING = "sending"  # claimed under a lease by a worker; reclaimed when the lease runs out
    SENT = "sent"  # the SMTP server accepted it with a 2yz reply after the final "."
    FAILED = "failed"  # permanent rejection (5yz, bad address, render error); never retried alone
    DEAD = "dead"  # gave up: too many attempts or too old; an alert fired
    CANCELLED = "cancelled"  # withdrawn before sending, by an operator or a send-time guard
    UNKNOWN = "unknown"  # parked after an ambiguous send (on_unknown=hold), awaiting review

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATUSES


FINAL_STATUSES = frozenset({Status.SENT, Status.FAILED, Status.DEAD, Status.CANCELLED})


class Outcome(enum.StrEnum):
    """What one send attempt ended as, recorded on ``mailout_attempts``."""

    SENT = "sent"  # accepted by the server
    RETRY = "retry"  # transient failure; the message is rescheduled
    FAILED = "failed"  # permanent failure of this message
    DEAD = "dead"  # transient failure, but a limit was reached
    UNKNOWN = "unknown"  # the server may or may not have accepted it (lost reply, lost lease)
    PAUSED = "paused"  # configuration error; the message went back uncharged
    OUTAGE = "outage"  # the provider was unreachable or refused everyone; back uncharged
    CANCELLED = "cancelled"  # a send-time guard withdrew it (stale, not allowed...)
    HELD = "held"  # left pending unsent: this worker cannot judge it (unknown schema)
    # Left pending unsent, uncharged: an earlier attempt's outcome is unknown and the one
    # failover member that may have it (inside its key window) is down; it waits for it.
    WAITING = "waiting"
    PARKED = "parked"  # not sent: an earlier attempt may have delivered it; held for review
    PARTIAL = "partial"  # accepted for some recipients; the others are tried again


class Settled(enum.StrEnum):
    """Where one recipient of a message to several stands for good."""

    SENT = "sent"  # the provider accepted the message for this recipient
    FAILED = "failed"  # refused for good (5yz): never tried again
    DEAD = "dead"  # refused for now (4yz) until the message ran out of attempts or time
    SUPPRESSED = "suppressed"  # on the suppression list at send time: left out


PARTIALLY_REFUSED = "partially_refused"  # the reason of a sent row some recipients refused


class Contact(enum.StrEnum):
    """What one attempt says about the transport itself (for the worker's breakers)."""

    NONE = "none"  # nothing reached the transport: a render error, a guard, an age limit
    ANSWERED = "answered"  # the transport got past the connection: it works
    PAUSE = "pause"  # a configuration error (credentials, TLS): a setting must change
    OUTAGE = "outage"  # the provider was unreachable or refused everyone


class OnUnknown(enum.StrEnum):
    """What to do after an attempt whose outcome is unknown."""

    RESEND = "resend"  # send again with the same Message-ID and key (at-least-once)
    HOLD = "hold"  # park the row in status unknown until an operator settles it


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """What :func:`mailout.enqueue` returns."""

    id: int
    key: str
    message_id: str
    created: bool  # False when the key already existed and nothing was written


@dataclass(frozen=True, slots=True)
class ClaimedMessage:
    """An outbox row claimed by a worker, with everything needed to send it."""

    id: int
    key: str
    queue: str
    priority: int
    recipient: str
    sender: str | None
    template: str | None
    params: dict[str, Any] | None
    subject: str | None
    text: str | None
    html: str | None
    headers: dict[str, str] | None
    message_id: str
    attempts: int  # including the attempt this claim starts
    unknown_attempts: int  # earlier attempts that may have delivered it
    created_at: datetime
    expires_at: datetime | None
    lease_token: str
    claimed_at: datetime  # database clock at claim time
    reclaimed: bool  # the previous lease ran out: an earlier attempt's outcome is unknown
    event_ref: str | None = None  # the business event, for send-time staleness checks
    event_version: str | None = None
    schema_version: int | None = None  # the payload schema the enqueuing code wrote
    suppressed: bool = False  # the recipient was on the suppression list when claimed
    # Every To mailbox with its display name; empty means ``recipient`` alone, bare.
    to: tuple[Mailbox, ...] = ()
    cc: tuple[Mailbox, ...] = ()
    bcc: tuple[Mailbox, ...] = ()
    reply_to: tuple[Mailbox, ...] = ()
    locale: str | None = None  # picks the template variant (es-MX, then es, then the default)
    has_attachments: bool = False  # the worker loads them before rendering
    attachments: tuple[Attachment, ...] = ()  # once loaded
    # Recipients settled by earlier attempts (address -> Settled value): never sent again.
    settled: Mapping[str, str] = field(default_factory=dict)
    # The earliest attempt that may have delivered it and is not settled (None: none),
    # and the transport it went through ("*": several; None: not recorded).
    unknown_since: datetime | None = None
    unknown_via: str | None = None
    # The whole message as the enqueuing code built it (Django's), sent as it is over
    # SMTP; None: rendered from the fields above.
    mime: bytes | None = field(default=None, repr=False)
    # Shared by the rows of one ordered enqueue: started one after the other.
    batch: str | None = None
    # The W3C trace context the row was enqueued under (an active span at enqueue):
    # each attempt's send span links to it. None: enqueued outside any trace.
    traceparent: str | None = None
    tracestate: str | None = None

    @property
    def envelope_recipients(self) -> tuple[str, ...]:
        """Every recipient (to, cc, bcc), bare addresses, first occurrence kept."""
        if not self.to and not self.cc and not self.bcc:
            return (self.recipient,)
        to = self.to or (Mailbox(self.recipient),)
        return tuple(dict.fromkeys(m.address for m in (*to, *self.cc, *self.bcc)))

    @property
    def pending_recipients(self) -> tuple[str, ...]:
        """The recipients this attempt sends to: all but those settled before."""
        return tuple(a for a in self.envelope_recipients if a not in self.settled)

    @property
    def several_recipients(self) -> bool:
        """Whether each recipient's fate is tracked on its own."""
        return bool(self.cc or self.bcc or len(self.to) > 1)


AFTER_UNKNOWN_SUFFIX = "_after_unknown"  # on a parked give-up's reason, as the row keeps it


@dataclass(frozen=True, slots=True)
class Completion:
    """How one claimed attempt ended, and what the row becomes."""

    id: int
    lease_token: str
    attempt: int
    outcome: Outcome
    status: Status  # SENT, PENDING (retry or paused), FAILED, DEAD or UNKNOWN
    started_at: datetime
    worker: str
    recipient: str
    delay_seconds: float | None = None  # for PENDING: when to try again
    uncharge: bool = False  # a paused or outage attempt does not count against max_attempts
    reason: str | None = None
    # UNKNOWN after a give-up (refused, or out of attempts or age) that an earlier
    # attempt with an unknown outcome may have made moot: parked for review, since
    # failed and dead must mean "not delivered". ``reason`` is why it gave up.
    parked_after_unknown: bool = False
    stage: str | None = None
    reply_code: int | None = None
    enhanced_code: str | None = None
    reply_text: str | None = None
    detail: str | None = None
    provider_message_id: str | None = None
    logged: bool = True  # False when no attempt was made (a row parked at claim)
    redirected_to: str | None = None  # MAILOUT_REDIRECT_TO delivered it there instead
    contact: Contact = Contact.NONE  # what the attempt says about the transport
    transport: str | None = None  # the transport (failover member) the attempt went through
    # A message to several recipients: how each one this attempt sent to fared, and
    # the row's new map of settled recipients (None leaves it as it is).
    recipients: tuple[RecipientOutcome, ...] = ()
    settled: Mapping[str, str] | None = None

    @property
    def row_reason(self) -> str | None:
        """The reason as the row keeps it and operators read it: a give-up parked after
        an unknown outcome ends in ``_after_unknown`` (docs/operations.md)."""
        if self.parked_after_unknown and self.reason is not None:
            return f"{self.reason}{AFTER_UNKNOWN_SUFFIX}"
        return self.reason


@dataclass(frozen=True, slots=True)
class RecipientOutcome:
    """How one recipient of a message to several fared in one attempt."""

    address: str
    outcome: Outcome  # SENT, RETRY, FAILED, DEAD or UNKNOWN
    reply_code: int | None = None
    enhanced_code: str | None = None
    reply_text: str | None = None
    transport: str | None = None  # the transport (failover member) the attempt went through


@dataclass(frozen=True, slots=True)
class Mailbox:
    """One address with its display name, as it appears in a header.

    ``address`` is the bare ``user@domain`` (the SMTP envelope form); ``name`` is the
    display name, kept exactly as given (empty when there is none).
    """

    address: str
    name: str = ""

    def __str__(self) -> str:
        if not self.name:
            return self.address
        return f"{_quoted(self.name)} <{self.address}>"


_SPECIALS = frozenset('()<>[]:;@\\,."')


def _quoted(name: str) -> str:
    if not any(c in _SPECIALS for c in name):
        return name
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


DEFAULT_CONTENT_TYPE = "application/octet-stream"
# The standard library's built-in table only: the system's mime.types differs from
# one machine to the next, and the type is part of the stored message.
_TYPES = mimetypes.MimeTypes()

AttachmentContent = bytes | bytearray | memoryview | os.PathLike[str] | BinaryIO


@dataclass(frozen=True, slots=True, init=False)
class Attachment:
    """A file carried by a message: attached, or inline (referenced as ``cid:``).

    ``content`` may be given as bytes, a path (``pathlib.Path``) or a binary file
    object; a path or file is read at once, so the attachment always holds bytes.
    A ``str`` is refused (TypeError): it could be a path or the content. Without a
    ``content_type`` one is guessed from the filename (``application/octet-stream``
    when nothing fits). An inline part without a ``cid`` uses its filename as its
    Content-ID. Reading a path raises OSError as ``open()`` does.
    """

    filename: str
    content: bytes = field(repr=False)
    content_type: str = DEFAULT_CONTENT_TYPE
    inline: bool = False
    cid: str | None = None  # Content-ID for inline parts, without angle brackets

    def __init__(self, filename: str, content: AttachmentContent,
                 content_type: str | None = None, inline: bool = False,
                 cid: str | None = None) -> None:
        object.__setattr__(self, "filename", filename)
        object.__setattr__(self, "content", _read(content))
        guessed = content_type or (isinstance(filename, str) and _TYPES.guess_type(
            filename, strict=False)[0]) or DEFAULT_CONTENT_TYPE
        object.__setattr__(self, "content_type", guessed)
        object.__setattr__(self, "inline", inline)
        object.__setattr__(self, "cid", cid if cid is not None or not inline else filename)


def _read(content: AttachmentContent) -> bytes:
    if isinstance(content, bytes):
        return content
    if isinstance(content, bytearray | memoryview):
        return bytes(content)
    if isinstance(content, str):
        raise TypeError("attachment content is a str: pass bytes, a pathlib.Path or a "
                        "binary file object")
    if isinstance(content, os.PathLike):
        return Path(content).read_bytes()
    read = getattr(content, "read", None)
    if callable(read):
        data = read()
        if isinstance(data, bytes):
            return data
        raise TypeError("attachment file must be opened in binary mode ('rb')")
    raise TypeError(f"attachment content must be bytes, a path or a binary file, not "
                    f"{type(content).__name__}")


# -- delivery events: what providers and mail servers report back (mailout.feedback) ----

class EventType(enum.StrEnum):
    """What happened to one message for one recipient."""

    DELIVERED = "delivered"  # the receiving server accepted it
    BOUNCED = "bounced"  # it came back; subtype hard (permanent) or soft (gave up, temporary)
    DEFERRED = "deferred"  # delivery is delayed and still being retried: informational
    COMPLAINED = "complained"  # the recipient marked it as spam (feedback loop / ARF)
    UNSUBSCRIBED = "unsubscribed"  # the recipient unsubscribed through the provider
    REJECTED = "rejected"  # the provider refused to send it (its own suppression, policy)
    AUTH_FAILURE = "auth_failure"  # an RFC 6591 report: SPF/DKIM/DMARC failed; no complaint


class BounceKind(enum.StrEnum):
    """The subtype of a bounce."""

    HARD = "hard"  # permanent: the address does not exist or refuses mail for good
    SOFT = "soft"  # temporary reason (mailbox full, greylisting) but the sender gave up


class Provider(enum.StrEnum):
    """Where an event came from."""

    RESEND = "resend"  # Resend webhooks (signed by Svix)
    POSTMARK = "postmark"  # Postmark webhooks (basic auth)
    SES = "ses"  # Amazon SES notifications through SNS (signed by SNS)
    SENDGRID = "sendgrid"  # SendGrid Event Webhook (ECDSA)
    MAILGUN = "mailgun"  # Mailgun webhooks (HMAC)
    BREVO = "brevo"  # Brevo transactional webhooks (basic auth or bearer token)
    DSN = "dsn"  # an RFC 3464 delivery status notification read from mail
    ARF = "arf"  # an RFC 5965 abuse feedback report read from mail
    TEXT_BOUNCE = "text_bounce"  # a plain-text bounce (qmail, Exim...) read from mail
    OPERATOR = "operator"  # recorded by hand


@dataclass(frozen=True, slots=True)
class Event:
    """One event for one recipient, as every provider's report is normalised.

    ``event_id`` is the provider's id, made unique per recipient; where the provider
    has none it is derived from the event's content (:func:`derived_id`), so a
    redelivered copy gets the same id and is stored once. The link fields are
    whatever the report carried: the provider's message id, the RFC 5322 Message-ID
    (with its ``<>``), the envelope return path.
    """

    provider: Provider
    event_id: str
    type: EventType
    recipient: str
    occurred_at: datetime
    subtype: str | None = None  # BounceKind for bounces; feedback type for complaints
    reason: str | None = None  # why a bounce happened (mailout.feedback.bounce_rules.Reason)
    provider_message_id: str | None = None
    message_id: str | None = None
    return_path: str | None = None
    diagnostic: str | None = None  # status code and text, e.g. "5.1.1 user unknown"
    payload: str = ""  # the provider's raw record for this event, size-capped
