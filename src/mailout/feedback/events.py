"""Delivery events in provider-neutral form: the helpers that turn what a bounce, a
complaint or a delivery report says, whoever reported it, into
:class:`~mailout.models.Event` records.

Webhook receivers (:mod:`mailout.webhooks`) and the DSN/ARF parser
(:mod:`mailout.feedback.dsn`) build the records (kept in :mod:`mailout.models`, since
the database stores them too); the ingest service (:mod:`mailout.feedback.ingest`)
stores them, links them to outbox rows and suppresses addresses. Plain values, no I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from typing import Any

PAYLOAD_MAX_BYTES = 8192  # the raw payload kept per event; the rest is cut off
DIAGNOSTIC_MAX = 1000
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


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
