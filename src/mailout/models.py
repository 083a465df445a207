"""Records and enums shared across modules. Plain values, no I/O."""

from __future__ import annotations

import enum
from dataclasses import dataclass
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
    CANCELLED = "cancelled"  # a send-time guard withdrew it (stale, not allowed...)
    HELD = "held"  # left pending unsent: this worker cannot judge it (unknown schema)


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
