"""Delivery events in provider-neutral form: what a bounce, a complaint or a delivery
report says, whoever reported it.

Webhook receivers (:mod:`mailout.webhooks`) and the DSN/ARF parser
(:mod:`mailout.feedback.dsn`) turn their input into :class:`Event` records; the ingest service
(:mod:`mailout.feedback.ingest`) stores them, links them to outbox rows and suppresses
addresses. Plain values, no I/O.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from mailout.exceptions import ConfigError

PAYLOAD_MAX_BYTES = 8192  # the raw payload kept per event; the rest is cut off
DIAGNOSTIC_MAX = 1000
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class EventType(enum.StrEnum):
    """What happened to one message for one recipient."""

    DELIVERED = "delivered"  # the receiving server accepted it
    BOUNCED = "bounced"  # it came back; subtype hard (permanent) or soft (gave up, temporary)
    DEFERRED = "deferred"  # delivery is delayed and still being retried: informational
    COMPLAINED = "complained"  # the recipient marked it as spam (feedback loop / ARF)
    UNSUBSCRIBED = "unsubscribed"  # the recipient unsubscribed through the provider
    REJECTED = "rejected"  # the provider refused to send it (its own suppression, policy)


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
    provider_message_id: str | None = None
    message_id: str | None = None
    return_path: str | None = None
    diagnostic: str | None = None  # status code and text, e.g. "5.1.1 user unknown"
    payload: str = ""  # the provider's raw record for this event, size-capped


def normalize_address(raw: str) -> str:
    """An address as stored for matching: trimmed, ``<>`` and ``mailto:`` removed,
    lower-cased. Mailbox local parts are case-sensitive in theory and never in
    practice; suppression must not miss ``Bob@`` because ``bob@`` bounced."""
    value = raw.strip()
    if value.lower().startswith("mailto:"):
        value = value[7:]
    if value.lower().startswith("rfc822;"):
        value = value[7:]
    return value.strip().strip("<>").strip().lower()


def normalize_message_id(raw: str | None) -> str | None:
    """A Message-ID as mailout stores it: one ``<...>`` token; None if empty."""
    if raw is None:
        return None
    value = raw.strip()
    if not value:
        return None
    match = re.search(r"<[^<>\s]+>", value)
    if match:
        return match.group(0)
    return f"<{value.strip('<>')}>" if " " not in value else None


def clip(text: str | None, limit: int = DIAGNOSTIC_MAX) -> str | None:
    """``text`` on one line without control characters, at most ``limit`` long."""
    if text is None:
        return None
    flat = _CONTROL.sub(" ", text).strip()
    flat = re.sub(r"\s{2,}", " ", flat)
    return flat[:limit] or None


def payload_text(record: Any, limit: int = PAYLOAD_MAX_BYTES) -> str:
    """A provider record as compact JSON, cut to ``limit`` bytes (never mid-character)."""
    text = record if isinstance(record, str) else json.dumps(
        record, separators=(",", ":"), sort_keys=True, default=str)
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", errors="ignore")


def derived_id(*parts: object) -> str:
    """A stable id for a provider event that has none: a hash of what identifies it."""
    joined = "\x1f".join("" if p is None else str(p) for p in parts)
    return "h:" + hashlib.sha256(joined.encode("utf-8")).hexdigest()[:40]


def from_timestamp(value: float | int | str) -> datetime:
    """Seconds (or milliseconds, if larger than any date in seconds) since the epoch."""
    seconds = float(value)
    if seconds > 1e11:
        seconds /= 1000.0
    return datetime.fromtimestamp(seconds, UTC)


def parse_time(value: str) -> datetime:
    """An ISO 8601 time (``Z`` allowed); naive means UTC. Raises ValueError."""
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


@dataclass(frozen=True)
class ReturnPath:
    """``MAILOUT_RETURN_PATH``: a per-message envelope sender such as
    ``bounces+{id}@shop.example``. Raises ConfigError for a template without exactly
    one ``{id}`` or with characters an address cannot hold."""

    template: str
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.template.count("{id}") != 1 or "@" not in self.template:
            raise ConfigError("MAILOUT_RETURN_PATH",
                              "must be an address with one {id}, e.g. bounces+{id}@shop.example")
        if re.search(r"[\s<>()\[\],;:\"\\]|[^\x21-\x7e]", self.template.replace("{id}", "1")):
            raise ConfigError("MAILOUT_RETURN_PATH", "has characters an address cannot hold")
        before, after = self.template.lower().split("{id}")
        pattern = re.compile(re.escape(before) + r"(\d{1,18})" + re.escape(after))
        object.__setattr__(self, "_pattern", pattern)

    def for_row(self, row_id: int) -> str:
        """The envelope sender for outbox row ``row_id``."""
        return self.template.replace("{id}", str(row_id))

    def row_id(self, address: str | None) -> int | None:
        """The row id a bounce address carries, or None if it is not one of ours."""
        if not address:
            return None
        match = self._pattern.fullmatch(address.strip().strip("<>").lower())
        return int(match.group(1)) if match else None
