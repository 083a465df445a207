"""Per-recipient outcomes of messages to several recipients, for operators.

Like :mod:`mailout.db.operator`, every function runs in the caller's transaction and
never returns a message's params or body.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select

from mailout.db.schema import attempt_recipients, messages


@dataclass(frozen=True, slots=True)
class RecipientRecord:
    """Where one recipient of a message to several stands: its kind (to, cc, bcc),
    its settled status if any, and its latest logged outcome with the reply."""

    address: str
    kind: str
    settled: str | None  # sent, failed, dead; None while it may still be tried
    outcome: str | None  # of the latest attempt that included it
    attempt: int | None
    reply_code: int | None
    enhanced_code: str | None
    reply_text: str | None


def recipients(conn: Connection, message_id: int) -> list[RecipientRecord]:
    """Each recipient of a message to several, in to, cc, bcc order; [] for a message
    to one (its row and attempt log say it all)."""
    row = conn.execute(select(messages.c.addresses, messages.c.settled)
                       .where(messages.c.id == message_id)).first()
    if row is None or not row.addresses:
        return []
    kinds: dict[str, str] = {}
    for kind in ("to", "cc", "bcc"):
        for _name, address in row.addresses.get(kind) or ():
            kinds.setdefault(address, kind)
    if len(kinds) < 2:  # one recipient: nothing per recipient to show
        return []
    latest: dict[str, Any] = {}
    for logged in conn.execute(select(attempt_recipients)
                               .where(attempt_recipients.c.outbox_id == message_id)
                               .order_by(attempt_recipients.c.id)):
        latest[logged.address] = logged
    settled = row.settled or {}
    out = []
    for address, kind in kinds.items():
        last = latest.get(address)
        out.append(RecipientRecord(
            address, kind, settled.get(address), last.outcome if last else None,
            last.attempt if last else None, last.reply_code if last else None,
            last.enhanced_code if last else None, last.reply_text if last else None))
    return out
