"""Ingesting delivery events: store each once, link it to its outbox row, suppress.

Used by the webhook receivers and by ``mailout bounces ingest``. One call runs in the
caller's transaction, so a signed delivery's nonce, its events and the suppressions
they cause commit together or not at all.

Linking tries, in order, the provider's message id, the Message-ID, and a VERP
return path built from ``MAILOUT_RETURN_PATH`` and signed with
``MAILOUT_RETURN_PATH_SECRET`` (``bounces+{id}-{tag}@shop.example``: a return path
whose tag does not verify links nothing).

Reports that arrive as mail (DSN, ARF) can be sent by anyone, so they act only when
they are provably about our mail: linked to a row, and naming one of that row's
recipients, or a complaint whose recipient is redacted (it then acts on the row's
recipient). Any other mail report is stored *unverified*: kept, listed, counted, and
acting on nothing; it does not count towards the soft bounce limit or the rate alerts
either. Webhook events are signed by their provider and act whether or not they link.

Suppression: a hard bounce, a complaint or an unsubscribe suppresses the recipient
at once; soft bounces only once ``soft_bounce_limit`` of them happened within
``soft_bounce_window`` seconds. Only newly stored events act: a redelivered copy
changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace

from sqlalchemy import Connection

from mailout.db import delivery_events as sql
from mailout.db.suppressions import suppress
from mailout.db.webhook_nonces import claim_nonce
from mailout.exceptions import MailoutError
from mailout.feedback.bounce_rules import SENDER_SIDE_REASONS, classify
from mailout.message.return_path import ReturnPath
from mailout.models import BounceKind, Event, EventType, Provider
from mailout.support import tracing

DEFAULT_SOFT_BOUNCE_LIMIT = 3
DEFAULT_SOFT_BOUNCE_WINDOW = 7 * 86400.0
REASON_HARD_BOUNCE = "hard_bounce"
REASON_SOFT_BOUNCES = "soft_bounces"
REASON_COMPLAINT = "complaint"
REASON_UNSUBSCRIBE = "unsubscribe"
REASON_MANUAL = "manual"
# Events read from mail rather than received from a signed webhook.
MAIL_REPORTS = frozenset({Provider.DSN, Provider.ARF, Provider.TEXT_BOUNCE})
SENDER_SIDE = frozenset(r.value for r in SENDER_SIDE_REASONS)
_REDACTED = re.compile(r"x+|\*+|#+|redacted|removed|anonymi[sz]ed|undisclosed[-_ ]?recipients?|"
                       r"unknown|\.+")
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
    unverified: int = 0  # new mail reports that may not act: unlinked or not our recipient
    sender_rejected: int = 0  # new verified bounces that blame our sender: alert the operator
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
    matched = duplicates = unverified = sender_rejected = 0
    for event in map(_with_reason, batch):
        link = _link_for(event, links, policy)
        address = _acting_address(event, link)
        if event.type is EventType.AUTH_FAILURE:
            address = None  # a DMARC/DKIM/SPF failure report: about our setup, no one's mail
        elif address is None and event.provider in MAIL_REPORTS:
            link = None  # not provably about this row: stored unverified
        elif address and event.recipient and address != event.recipient:
            event = replace(event, recipient=address)  # a redacted complaint: the row's
        event_id = sql.store_event(conn, event, link)
        if event_id is None:
            duplicates += 1
            continue
        stored.append((event, link is not None))
        matched += link is not None
        unverified += link is None and event.provider in MAIL_REPORTS
        sender_rejected += address is not None and event.reason in SENDER_SIDE
        with _ingest_span(event, link):
            if policy.suppress and address and _suppress(conn, event, address, event_id,
                                                         policy):
                suppressed.append(address)
    return Result(stored=len(stored), duplicates=duplicates, matched=matched,
                  unmatched=len(stored) - matched, unverified=unverified,
                  sender_rejected=sender_rejected,
                  suppressed=tuple(suppressed), stored_events=tuple(stored))


def _ingest_span(event: Event, link: sql.Link | None) -> AbstractContextManager[object]:
    """The ``ingest`` span of a new event linked to a row enqueued inside a trace
    (see :func:`mailout.support.tracing.ingesting`); nothing otherwise."""
    if link is None or link.traceparent is None:
        return tracing.NOTHING
    return tracing.ingesting(
        link.traceparent, link.tracestate, event_type=event.type.value,
        provider=event.provider.value, outbox_id=link.outbox_id, matched_by=link.matched_by,
        subtype=event.subtype, reason=event.reason)


def _with_reason(event: Event) -> Event:
    """A provider's bounce (webhooks judge hard or soft themselves) with the reason its
    diagnostic gives, as bounce mail has: stored, shown, and a sender-side one
    suppresses nobody."""
    if event.type is not EventType.BOUNCED or event.reason is not None:
        return event
    return replace(event, reason=classify(None, event.diagnostic).reason.value)


def _acting_address(event: Event, link: sql.Link | None) -> str | None:
    """The address ``event`` may act on, or None.

    A webhook event (signed by its provider) acts on the address it names, or the
    linked row's. A mail report acts only when linked, on the address it names if
    that is one of the row's recipients; a complaint with a redacted recipient acts on
    the row's recipient. Never on anything else: not on an ARF report's enclosed To:
    list, not on the address a forged report names.
    """
    if event.provider not in MAIL_REPORTS:
        return event.recipient or (link.recipient.lower() if link else None)
    if link is None:
        return None
    if event.recipient and event.recipient in link.recipients:
        return event.recipient
    if event.type is EventType.COMPLAINED and is_redacted(event.recipient):
        return link.recipient.lower()
    return None


def is_redacted(address: str) -> bool:
    """An address a feedback loop blanked out: empty, or a local part of x's, stars,
    or a word such as ``redacted``."""
    local = address.rpartition("@")[0] if "@" in address else address
    return not local or _REDACTED.fullmatch(local.lower()) is not None


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
        return links.get((sql.MATCHED_BY_RETURN_PATH, str(row_id)))
    return None


def _suppress(conn: Connection, event: Event, address: str, event_id: int,
              policy: Policy) -> bool:
    reason = _IMMEDIATE.get(event.type)
    if event.reason in SENDER_SIDE:
        return False  # our sender was refused: an operator alert, not the recipient's fault
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
