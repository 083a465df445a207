"""Ingesting delivery events: store each once, link it to its outbox row, suppress.

Used by the webhook receivers and by ``mailout bounces ingest``. One call runs in the
caller's transaction, so a signed delivery's nonce, its events and the suppressions
they cause commit together or not at all.

Linking tries, in order, the provider's message id, the Message-ID, and a VERP
return path built from ``MAILOUT_RETURN_PATH`` (``bounces+{id}@shop.example``:
``{id}`` is the row id). A return path only links when the event's recipient is the
row's recipient (or the event names none): anyone can send mail to a return path.
An event that matches no row is stored all the same, with no link, and counted.

Suppression: a hard bounce, a complaint or an unsubscribe suppresses the recipient
at once; soft bounces only once ``soft_bounce_limit`` of them happened within
``soft_bounce_window`` seconds. Only newly stored events act: a redelivered copy
changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection

from mailout.db import delivery_events as sql
from mailout.db.suppressions import suppress
from mailout.db.webhook_nonces import claim_nonce
from mailout.exceptions import MailoutError
from mailout.message.return_path import ReturnPath
from mailout.models import BounceKind, Event, EventType

DEFAULT_SOFT_BOUNCE_LIMIT = 3
DEFAULT_SOFT_BOUNCE_WINDOW = 7 * 86400.0
REASON_HARD_BOUNCE = "hard_bounce"
REASON_SOFT_BOUNCES = "soft_bounces"
REASON_COMPLAINT = "complaint"
REASON_UNSUBSCRIBE = "unsubscribe"
REASON_MANUAL = "manual"
_IMMEDIATE = {
    EventType.COMPLAINED: REASON_COMPLAINT,
    EventType.UNSUBSCRIBED: REASON_UNSUBSCRIBE,
}


__all__ = ["Policy", "Replayed", "Result", "ReturnPath", "ingest"]


class Replayed(MailoutError, ValueError):
    """A signed webhook delivery whose nonce was already accepted: nothing was stored."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        super().__init__(f"{provider}: this signed delivery was already received (replay)")


@dataclass(frozen=True)
class Policy:
    """What ingestion does beyond storing: linking by return path and suppression."""

    return_path: ReturnPath | None = None
    soft_bounce_limit: int = DEFAULT_SOFT_BOUNCE_LIMIT  # MAILOUT_SOFT_BOUNCE_LIMIT
    soft_bounce_window: float = DEFAULT_SOFT_BOUNCE_WINDOW  # MAILOUT_SOFT_BOUNCE_WINDOW
    suppress: bool = True


@dataclass(frozen=True, slots=True)
class Result:
    """What one ingestion stored."""

    stored: int = 0  # new events
    duplicates: int = 0  # already stored: a redelivery
    matched: int = 0  # new events linked to an outbox row
    unmatched: int = 0  # new events linked to none (kept, counted)
    suppressed: tuple[str, ...] = ()  # addresses newly suppressed
    stored_events: tuple[tuple[Event, bool], ...] = ()  # new events, and whether matched


def ingest(conn: Connection, batch: Sequence[Event], policy: Policy,
           nonce: tuple[str, str] | None = None) -> Result:
    """Store ``batch`` in the caller's transaction, link, suppress.

    ``nonce`` is (provider, nonce) of a signed delivery: :class:`Replayed` is raised,
    before anything is written, when it was accepted before.
    """
    if nonce is not None and not claim_nonce(conn, *nonce):
        raise Replayed(nonce[0])
    links = _links(conn, batch, policy)
    stored: list[tuple[Event, bool]] = []
    suppressed: list[str] = []
    matched = duplicates = 0
    for event in batch:
        link = _link_for(event, links, policy)
        event_id = sql.store_event(conn, event, link)
        if event_id is None:
            duplicates += 1
            continue
        stored.append((event, link is not None))
        matched += link is not None
        address = event.recipient or (link.recipient.lower() if link else "")
        if policy.suppress and address and _suppress(conn, event, address, event_id, policy):
            suppressed.append(address)
    return Result(stored=len(stored), duplicates=duplicates, matched=matched,
                  unmatched=len(stored) - matched, suppressed=tuple(suppressed),
                  stored_events=tuple(stored))


def _links(conn: Connection, batch: Sequence[Event], policy: Policy
           ) -> dict[tuple[str, str], sql.Link]:
    row_ids = []
    if policy.return_path is not None:
        row_ids = [i for e in batch if (i := policy.return_path.row_id(e.return_path))]
    provider_ids = [p for e in batch if e.provider_message_id
                    for p in _provider_id_forms(e.provider_message_id)]
    return sql.find_links(conn, provider_ids=provider_ids,
                          message_ids=[e.message_id for e in batch if e.message_id],
                          row_ids=row_ids)


def _provider_id_forms(pid: str) -> tuple[str, ...]:
    """A provider id as reported and as the send reply may have stored it: with and
    without ``<>``; SendGrid's event id extends the send id after a dot."""
    bare = pid.strip().strip("<>")
    return (pid, bare, f"<{bare}>", bare.split(".", 1)[0])


def _link_for(event: Event, links: dict[tuple[str, str], sql.Link],
              policy: Policy) -> sql.Link | None:
    if event.provider_message_id:
        for form in _provider_id_forms(event.provider_message_id):
            link = links.get((sql.MATCHED_BY_PROVIDER_ID, form))
            if link is not None:
                return link
    if event.message_id:
        link = links.get((sql.MATCHED_BY_MESSAGE_ID, event.message_id))
        if link is not None:
            return link
    row_id = policy.return_path.row_id(event.return_path) if policy.return_path else None
    if row_id is not None:
        link = links.get((sql.MATCHED_BY_RETURN_PATH, str(row_id)))
        if link is not None and (not event.recipient
                                 or event.recipient == link.recipient.lower()):
            return link
    return None


def _suppress(conn: Connection, event: Event, address: str, event_id: int,
              policy: Policy) -> bool:
    reason = _IMMEDIATE.get(event.type)
    if event.type is EventType.BOUNCED:
        if event.subtype == BounceKind.HARD:
            reason = REASON_HARD_BOUNCE
        elif sql.soft_bounces(conn, address, policy.soft_bounce_window) \
                >= policy.soft_bounce_limit:
            reason = REASON_SOFT_BOUNCES
    if reason is None:
        return False
    detail = f"{event.provider.value} {event.type.value}"
    if event.diagnostic:
        detail += f": {event.diagnostic}"
    return suppress(conn, address, reason, event_id=event_id, detail=detail,
                        actor=f"ingest:{event.provider.value}")
