"""How operator records look: JSON documents and Rich tables for the CLI.

JSON field names are the dataclass field names of :mod:`mailout.db.operator` records,
times are ISO 8601 in UTC. Tables are for people: times to the millisecond in
UTC, ages as ``3m 12s``. Nothing here shows a message's params or body, because
the records never carry them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from mailout.cli import terminal
from mailout.db.audit import AuditEntry
from mailout.db.operator import AttemptRecord, MessageRecord, StatusReport
from mailout.db.outages import TransportTrouble
from mailout.db.recipients import RecipientRecord

if TYPE_CHECKING:  # Rich is imported when a table is drawn: --json output skips its cost
    from rich.console import Console
    from rich.table import Table

PIPED_WIDTH = 120
STATUS_COLUMNS = ("pending", "sending", "sent", "failed", "dead", "cancelled", "unknown")
_SHOW_FIELDS = (
    "key", "status", "reason", "queue", "priority", "recipient", "sender", "template",
    "locale", "subject", "message_id", "provider_message_id", "attempts", "last_reply_code",
    "last_reply_text", "lease_owner",
)


def jsonable(value: Any) -> Any:
    """``value`` with dataclasses as dicts and datetimes as ISO strings in UTC."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    return value


def to_json(value: Any) -> str:
    return json.dumps(jsonable(value), indent=2)


def when(moment: datetime | None) -> str:
    """A UTC timestamp for people, to the millisecond; ``-`` for none."""
    if moment is None:
        return "-"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def age(seconds: float | None) -> str:
    """``4.2s``, ``12m 5s``, ``3h``, ``2d 4h``: two units at most; ``-`` for none."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    for unit, size, sub, subsize in (("d", 86400, "h", 3600), ("h", 3600, "m", 60),
                                     ("m", 60, "s", 1)):
        if whole >= size:
            rest = (whole % size) // subsize
            return f"{whole // size}{unit}" + (f" {rest}{sub}" if rest else "")
    return f"{seconds:.1f}s"


def console() -> Console:
    """A console for stdout. Piped output gets 120 columns (not Rich's 80), so tables
    written to a file or a pager fold fewer cells."""
    # No highlighting: ids and addresses must print exactly as stored. Soft wrap: long
    # lines (commands to copy) are left whole for the terminal to wrap.
    # Markup is off and control characters are written out: cells hold outside data.
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPED_WIDTH
    return terminal.console(soft_wrap=True, width=width)


def table(*columns: str, title: str | None = None, keep: tuple[str, ...] = ()) -> Table:
    """A table whose long cells wrap instead of being cut off with an ellipsis; the
    ``keep`` columns (short values: ids, times) never wrap."""
    from rich.table import Table

    out = Table(title=title, title_justify="left")
    for name in columns:
        out.add_column(name, overflow="fold", no_wrap=name in keep)
    return out


def print_status(out: Console, report: StatusReport) -> None:
    """One column per queue (and one for all), one row per status, then the backlog."""
    names = [q.queue for q in report.queues]
    grid = table("", *names, "all", title="Messages by status and queue",
                 keep=("", *names, "all"))
    for st in STATUS_COLUMNS:
        grid.add_row(st, *(str(q.counts[st]) for q in report.queues), str(report.totals[st]))
    grid.add_section()
    grid.add_row("due now", *(str(q.due) for q in report.queues),
                 str(sum(q.due for q in report.queues)))
    grid.add_row("oldest due, age", *(age(q.oldest_due_age_seconds) for q in report.queues),
                 age(_most(q.oldest_due_age_seconds for q in report.queues)))
    grid.add_row("due lag", *(age(q.due_lag_seconds) for q in report.queues),
                 age(_most(q.due_lag_seconds for q in report.queues)))
    out.print(grid)
    out.print(f"retrying (pending after a failed attempt): {report.retrying}")
    out.print(f"dead: {report.dead}")
    out.print(f"unknown outcome: {report.unknown_messages} messages "
              f"({report.unknown_attempts} attempts); {report.held_unknown} held in "
              "status unknown")
    out.print(f"last send: {when(report.last_sent_at)}   (database time: {when(report.now)})")
    print_transport(out, report.transport)


def print_transport(out: Console, trouble: TransportTrouble | None) -> None:
    """The transport's state as the attempt log shows it (see mailout.db.outages)."""
    if trouble is None:
        out.print("transport: ok (no outage or pause since it last answered)")
        return
    what = "OUTAGE" if trouble.kind == "outage" else "PAUSED (configuration error)"
    said = f": {terminal.one_line(trouble.said)}" if trouble.said else ""
    out.print(terminal.plain(f"transport: {what}", "bold red"),
              terminal.plain(f"since {when(trouble.since)}, {trouble.attempts} uncharged "
                             f"attempts, last at {when(trouble.last_at)} "
                             f"(stage {trouble.stage or '-'}){said}"))


def _most(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def print_list(out: Console, rows: list[MessageRecord]) -> None:
    """One line per message; the queue column only when the rows span several queues."""
    queues = len({r.queue for r in rows}) > 1
    columns = ["id", "status", *(["queue"] if queues else []), "template",
               "recipient", "tries", "created (UTC)", "due (UTC)"]
    listing = table(*columns, keep=("id", "tries", "created (UTC)", "due (UTC)"))
    from rich import box

    listing.box = box.SIMPLE  # no vertical rules: more room for the addresses
    for r in rows:
        created = _short(r.created_at)
        # Due only while it waits: a finished or leased row is not due.
        due = _short(r.next_attempt_at) if r.status == "pending" else "-"
        status = f"{r.status} ({r.reason})" if r.reason else r.status
        listing.add_row(str(r.id), status, *([r.queue] if queues else []),
                        r.template or f"\"{r.subject}\"", r.recipient, str(r.attempts), created,
                        due)
    if rows:
        out.print(listing)
    else:
        out.print("no messages match")


def _short(moment: datetime | None) -> str:
    """``MM-DD HH:MM:SS`` in UTC, for list columns; ``-`` for none."""
    return moment.astimezone(UTC).strftime("%m-%d %H:%M:%S") if moment else "-"


def print_message(out: Console, msg: MessageRecord, log: list[AttemptRecord],
                  each: list[RecipientRecord] | None = None,
                  history: list[AuditEntry] | None = None) -> None:
    fields = table("field", "value", title=f"Message {msg.id}")
    for name in _SHOW_FIELDS:
        value = getattr(msg, name)
        if value is not None:
            fields.add_row(name, str(value))
    out.print(fields)
    if each:
        out.print(recipients_table(each))
    out.print(timeline(msg, log))
    if history:
        out.print(audit_table(history, title="Operator actions"))


def audit_table(entries: list[AuditEntry], *, title: str) -> Table:
    """One row per audit entry: when, who, what, to what, why, and the counts."""
    out = table("time (UTC)", "who", "action", "target", "why", "changed", title=title,
                keep=("time (UTC)", "changed"))
    for e in entries:
        counts = str(e.changed) + (f" ({e.skipped} skipped)" if e.skipped else "")
        out.add_row(when(e.created_at), e.actor, e.action, e.target, e.reason or "-", counts)
    return out


def recipient_state(r: RecipientRecord) -> str:
    """``sent``, ``failed``, ``dead`` once settled; else the latest outcome or pending."""
    return r.settled or r.outcome or "pending"


def recipients_table(each: list[RecipientRecord]) -> Table:
    """One line per recipient of a message to several: where it stands, and the reply."""
    out = table("recipient", "kind", "status", "attempt", "reply", title="Recipients",
                keep=("kind", "status", "attempt"))
    for r in each:
        reply = " ".join(str(x) for x in (r.reply_code, r.reply_text) if x is not None)
        out.add_row(r.address, r.kind, recipient_state(r),
                    "-" if r.attempt is None else str(r.attempt), reply or "-")
    return out


def timeline(msg: MessageRecord, log: list[AttemptRecord]) -> Table:
    """Created, each attempt, sent, finished and the next due time, in time order."""
    events: list[tuple[datetime | None, str, str]] = [(msg.created_at, "created", "")]
    for a in log:
        reply = " ".join(str(x) for x in (a.reply_code, a.reply_text) if x is not None)
        detail = "; ".join(x for x in (reply, a.detail) if x)
        stage = f"at {a.stage}" if a.stage else ""
        given_back = "" if a.charged else " (not charged)"
        events.append((a.started_at, f"attempt {a.attempt}: {a.outcome}{given_back}",
                       ": ".join(x for x in (stage, detail) if x)))
    if msg.sent_at is not None:
        events.append((msg.sent_at, "sent", f"provider id {msg.provider_message_id or '-'}"))
    if msg.finished_at is not None:
        events.append((msg.finished_at, f"finished: {msg.status}", msg.reason or ""))
    if msg.status in ("pending", "sending"):
        events.append((msg.next_attempt_at, "next attempt due", msg.reason or ""))
    latest = datetime.max.replace(tzinfo=UTC)
    events.sort(key=lambda e: e[0] or latest)  # stable: same-time events keep their order
    out = table("time (UTC)", "event", "detail", title="Timeline", keep=("time (UTC)",))
    for at, event, detail in events:
        out.add_row(when(at), event, detail)
    return out


def trace_doc(msg: MessageRecord, matched_by: str,
              each: list[RecipientRecord] | None = None) -> dict[str, Any]:
    """The fields that link a business event, a Message-ID and a provider's id; for a
    message to several, each recipient's status (``address: status code``)."""
    doc = {
        "matched_by": matched_by, "id": msg.id, "key": msg.key, "message_id": msg.message_id,
        "provider_message_id": msg.provider_message_id, "status": msg.status,
        "reason": msg.reason, "recipient": msg.recipient, "template": msg.template,
        "attempts": msg.attempts, "created_at": msg.created_at,
        "first_attempt_at": msg.first_attempt_at, "sent_at": msg.sent_at,
        "finished_at": msg.finished_at,
    }
    if each:
        doc["recipients"] = {r.address: " ".join(
            str(x) for x in (recipient_state(r), r.reply_code, r.enhanced_code)
            if x is not None) for r in each}
    return doc


def print_trace(out: Console, ref: str, doc: dict[str, Any]) -> None:
    rows = table("field", "value", title=f"Trace of {ref} (matched by {doc['matched_by']})")
    for name, value in doc.items():
        if name == "matched_by":
            continue
        if isinstance(value, dict):
            for address, state in value.items():
                rows.add_row(f"recipient {address}", str(state))
            continue
        shown = when(value) if isinstance(value, datetime) else "-" if value is None else value
        rows.add_row(name, str(shown))
    out.print(rows)
