"""Operator actions and their audit entries, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine, func, select, update

from mailout.db import actions, audit, pauses
from mailout.db.actions import PauseKind, Resolution
from mailout.db.audit import AuditAction
from mailout.db.schema import audit as audit_table
from mailout.db.schema import messages
from mailout.models import Status
from mailout.outbox import EnqueueSettings, enqueue

SETTINGS = EnqueueSettings(message_id_domain="test.example.com")


def add(engine: Engine, n: int, status: Status = Status.PENDING) -> list[int]:
    with engine.begin() as conn:
        ids = [enqueue(conn, to=f"a{i}@example.com", subject="s", text="t", key=f"{status}-{i}",
                       settings=SETTINGS).id for i in range(n)]
        conn.execute(update(messages).where(messages.c.id.in_(ids)).values(status=status.value))
    return ids


def status_of(engine: Engine, rid: int) -> str:
    with engine.connect() as conn:
        return str(conn.scalar(select(messages.c.status).where(messages.c.id == rid)))


def test_each_action_changes_rows_and_logs_who_what_why(engine: Engine) -> None:
    dead = add(engine, 2, Status.DEAD)
    pending = add(engine, 2)
    unknown = add(engine, 2, Status.UNKNOWN)
    with engine.begin() as conn:
        retried = actions.retry(conn, [*dead, pending[0]], actor="ann (cli)",
                                reason="provider fixed")
        cancelled = actions.cancel(conn, [pending[1]], actor="bob (web, admin)", reason=None)
        sent = actions.resolve(conn, [unknown[0], dead[0]], Resolution.SENT, actor="ann (cli)",
                               reason="seen in provider log", provider_id="P-1")
        again = actions.resolve(conn, [unknown[1]], Resolution.RETRY, actor="ann (cli)")
        paused = actions.pause(conn, PauseKind.QUEUE, "bulk", actor="cy (cli)", reason="spam")
        repeat = actions.pause(conn, PauseKind.QUEUE, "bulk", actor="cy (cli)")
        resumed = actions.resume(conn, PauseKind.QUEUE, "bulk", actor="cy (cli)")
    assert retried.changed == dead
    assert retried.skipped == {pending[0]: "pending"}
    assert cancelled.changed == [pending[1]]
    assert sent.changed == [unknown[0]]
    assert sent.skipped == {dead[0]: "pending"}  # requeued a moment ago
    assert again.changed == [unknown[1]]
    assert (paused, repeat, resumed) == (True, False, True)
    assert status_of(engine, unknown[0]) == "sent"
    assert status_of(engine, unknown[1]) == "pending"
    with engine.connect() as conn:
        log = audit.entries(conn)
        assert pauses.list_pauses(conn) == []
        first = audit.for_message(conn, dead[0])
    assert [e.action for e in log] == ["resume", "pause", "pause", "resolve_retry",
                                       "resolve_sent", "cancel", "retry"]
    retry_entry = log[-1]
    assert retry_entry.actor == "ann (cli)"
    assert retry_entry.reason == "provider fixed"
    assert retry_entry.target == f"messages {dead[0]}, {dead[1]}, {pending[0]}"
    assert (retry_entry.changed, retry_entry.skipped) == (2, 1)
    assert log[1].changed == 0  # the repeated pause changed nothing, and is still logged
    assert (log[2].changed, log[2].target, log[2].reason) == (1, "queue bulk", "spam")
    assert [e.action for e in first] == ["retry"]  # the refused resolve did not change it
    assert log[0].created_at >= retry_entry.created_at


def test_entry_commits_and_rolls_back_with_its_change(engine: Engine) -> None:
    (rid,) = add(engine, 1, Status.FAILED)
    def failing_transaction() -> None:
        with engine.begin() as conn:
            actions.retry(conn, [rid], actor="ann (cli)")
            raise RuntimeError("the caller's transaction fails")

    with pytest.raises(RuntimeError):
        failing_transaction()
    assert status_of(engine, rid) == "failed"
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(audit_table)) == 0


def test_hostile_text_is_cleaned_and_clipped_not_refused(engine: Engine) -> None:
    (rid,) = add(engine, 1, Status.DEAD)
    with engine.begin() as conn:
        actions.retry(conn, [rid], actor="eve\x1b[31m (web)", reason="x" * 900 + "\r\nInjected",
                      target="<script>alert(1)</script>")
        with pytest.raises(ValueError, match="actor"):
            audit.record(conn, actor="  ", action=AuditAction.RETRY, target="x")
    with engine.connect() as conn:
        (entry,) = audit.entries(conn)
    assert entry.actor == "eve [31m (web)"
    assert entry.reason is not None
    assert len(entry.reason) == audit.REASON_MAX
    assert "\r" not in entry.reason
    assert entry.target == "<script>alert(1)</script>"  # stored verbatim, escaped on display


def test_bulk_target_lists_ten_ids_then_counts(engine: Engine) -> None:
    ids = add(engine, 12, Status.DEAD)
    with engine.begin() as conn:
        actions.retry(conn, ids, actor="ann (cli)")
        actions.log_purge(conn, timedelta(days=30), ["sent", "dead"], 5, actor="ann (cli)")
    with engine.connect() as conn:
        purge, retry = audit.entries(conn)
        paged = audit.entries(conn, before=purge.id)
    assert retry.target.endswith("(+2 more)")
    assert retry.changed == 12
    assert purge.target == "sent, dead finished over 30 days ago"
    assert purge.changed == 5
    assert paged == [retry]
