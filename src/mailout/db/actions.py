"""Operator actions, each with its audit entry: the one implementation the CLI, the
web console and any API share.

Each function changes rows through :mod:`mailout.db.operator` (or the pause switches)
and writes the :mod:`mailout.db.audit` entry in the caller's transaction, so an
action and its entry commit or roll back together. ``actor`` says who acted
(``"alice (cli)"``); ``reason`` says why and may be None; ``target`` describes
what was asked for when the ids alone do not (a bulk filter), else it is derived
from the ids.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from datetime import timedelta

from sqlalchemy import Connection

from mailout.db import operator, pauses
from mailout.db.audit import AuditAction, describe_ids, record


class Resolution(enum.StrEnum):
    """How an operator settles a message parked in ``unknown``."""

    SENT = "sent"  # the provider confirms delivery: mark it sent
    RETRY = "retry"  # it was not delivered: send again with the same Message-ID and key


class PauseKind(enum.StrEnum):
    """What an operator switch stops."""

    QUEUE = "queue"  # every message of one queue
    TEMPLATE = "template"  # every message of one template, in any queue


def retry(conn: Connection, ids: Iterable[int], *, actor: str, reason: str | None = None,
          target: str | None = None) -> operator.Change:
    """Requeue reviewed rows (see :func:`operator.requeue`) and log it."""
    wanted = sorted(set(ids))
    change = operator.requeue(conn, wanted)
    record(conn, actor=actor, action=AuditAction.RETRY, target=target or describe_ids(wanted),
           reason=reason, changed=change.changed, skipped=len(change.skipped))
    return change


def cancel(conn: Connection, ids: Iterable[int], *, actor: str, reason: str | None = None,
           target: str | None = None) -> operator.Change:
    """Cancel pending rows (see :func:`operator.cancel`) and log it."""
    wanted = sorted(set(ids))
    change = operator.cancel(conn, wanted)
    record(conn, actor=actor, action=AuditAction.CANCEL, target=target or describe_ids(wanted),
           reason=reason, changed=change.changed, skipped=len(change.skipped))
    return change


def resolve(conn: Connection, ids: Iterable[int], resolution: Resolution, *, actor: str,
            reason: str | None = None, provider_id: str | None = None,
            target: str | None = None) -> operator.Change:
    """Settle rows parked in ``unknown``: mark them sent (with the provider's id, if
    known) or requeue them. Rows in any other status are skipped. Logged."""
    wanted = sorted(set(ids))
    if resolution is Resolution.SENT:
        done = operator.mark_sent(conn, wanted, provider_id)
        action = AuditAction.RESOLVE_SENT
    else:
        done = operator.requeue(conn, operator.unknown_ids(conn, wanted)).changed
        action = AuditAction.RESOLVE_RETRY
    change = operator.Change(sorted(done), operator.skipped_statuses(conn, wanted, done))
    record(conn, actor=actor, action=action, target=target or describe_ids(wanted),
           reason=reason, changed=change.changed, skipped=len(change.skipped))
    return change


def pause(conn: Connection, kind: PauseKind, name: str, *, actor: str,
          reason: str | None = None) -> bool:
    """Pause a queue or template on every worker; False if it already was. Logged
    either way (an operator who meant to pause should find their attempt)."""
    changed = pauses.set_pause(conn, kind.value, name, reason)
    record(conn, actor=actor, action=AuditAction.PAUSE, target=f"{kind.value} {name}",
           reason=reason, changed_count=int(changed))
    return changed


def resume(conn: Connection, kind: PauseKind, name: str, *, actor: str,
           reason: str | None = None) -> bool:
    """Resume a paused queue or template; False if it was not paused. Logged."""
    changed = pauses.clear_pause(conn, kind.value, name)
    record(conn, actor=actor, action=AuditAction.RESUME, target=f"{kind.value} {name}",
           reason=reason, changed_count=int(changed))
    return changed


def log_purge(conn: Connection, older_than: timedelta, statuses: Sequence[str], count: int,
              *, actor: str, reason: str | None = None) -> None:
    """Log a purge before it runs, with the number of rows it was confirmed for.

    A purge deletes in many short transactions (see
    :func:`mailout.db.purging.purge_in_batches`), so it is logged once, up front,
    rather than once per batch.
    """
    days = older_than.total_seconds() / 86400
    record(conn, actor=actor, action=AuditAction.PURGE,
           target=f"{', '.join(statuses)} finished over {days:g} days ago",
           reason=reason, changed_count=count)
