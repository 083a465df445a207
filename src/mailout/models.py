"""Records and enums shared across modules. Plain values, no I/O, no imports of mailout."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


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
    stage: str | None = None
    reply_code: int | None = None
    enhanced_code: str | None = None
    reply_text: str | None = None
    detail: str | None = None
    provider_message_id: str | None = None
    logged: bool = True  # False when no attempt was made (a row parked at claim)
    redirected_to: str | None = None  # MAILOUT_REDIRECT_TO delivered it there instead
    contact: Contact = Contact.NONE  # what the attempt says about the transport


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


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file carried by a message: inline (referenced as ``cid:``) or attached."""

    filename: str
    content: bytes = field(repr=False)
    content_type: str = "application/octet-stream"
    inline: bool = False
    cid: str | None = None  # Content-ID for inline parts, without angle brackets
