"""Claiming, leases, fencing and completion on real databases."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, select, update

from mailout import db
from mailout.db import leasing, operator, outcomes
from mailout.db.schema import attempts, messages
from mailout.models import ClaimedMessage, Completion, Outcome, Status
from mailout.outbox import EnqueueSettings, enqueue
from tests.support.timetravel import expire_leases

SETTINGS = EnqueueSettings(message_id_domain="test.example.com")


def add(engine: Engine, n: int, **kw: object) -> list[int]:
    with engine.begin() as conn:
        return [
            enqueue(conn, to=f"u{i}@example.com", subject="Hi", text="x", key=f"k-{i}-{kw}",
                    settings=SETTINGS, **kw).id  # type: ignore[arg-type]
            for i in range(n)
        ]


def claim(engine: Engine, limit: int = 10, lease: float = 60, owner: str = "w1",
          queues: list[str] | None = None) -> list[ClaimedMessage]:
    with db.immediate(engine) as conn:
        return leasing.claim(conn, owner=owner, limit=limit, lease_seconds=lease, queues=queues)


def status_of(engine: Engine, rid: int) -> dict[str, object]:
    with engine.connect() as conn:
        return dict(conn.execute(select(messages).where(messages.c.id == rid)).one()._mapping)


def sent(c: ClaimedMessage, worker: str = "w1") -> Completion:
    return Completion(id=c.id, lease_token=c.lease_token, attempt=c.attempts,
                      outcome=Outcome.SENT, status=Status.SENT, started_at=c.claimed_at,
                      worker=worker, recipient=c.recipient, reply_code=250,
                      reply_text="2.0.0 Ok: queued as ABC", provider_message_id="ABC")


def test_claim_leases_due_rows_once(engine: Engine) -> None:
    add(engine, 5)
    first = claim(engine, limit=3)
    second = claim(engine, limit=10, owner="w2")
    assert len(first) == 3
    assert len(second) == 2
    assert not {m.id for m in first} & {m.id for m in second}
    assert claim(engine) == []
    row = status_of(engine, first[0].id)
    assert row["status"] == "sending"
    assert row["attempts"] == 1
    assert row["lease_owner"] == "w1"
    assert row["lease_token"] == first[0].lease_token
    assert row["lease_expires_at"] > row["last_attempt_at"]  # type: ignore[operator]


def test_claim_respects_priority_queue_and_schedule(engine: Engine) -> None:
    low = add(engine, 1, priority=0)
    high = add(engine, 1, priority=9)
    other = add(engine, 1, queue="bulk")
    add(engine, 1, send_at=datetime(2099, 1, 1, tzinfo=UTC))
    got = claim(engine, limit=10, queues=["default"])
    assert [m.id for m in got] == high + low
    assert [m.id for m in claim(engine, queues=["bulk"])] == other
    assert claim(engine) == []  # the scheduled one is not due


def test_completion_marks_sent_and_logs_the_attempt(engine: Engine) -> None:
    (rid,) = add(engine, 1)
    (c,) = claim(engine)
    with engine.begin() as conn:
        assert outcomes.complete(conn, [sent(c)]) == []
    row = status_of(engine, rid)
    assert row["status"] == "sent"
    assert row["provider_message_id"] == "ABC"
    assert row["sent_at"] is not None
    assert row["finished_at"] is not None
    assert row["lease_token"] is None
    with engine.connect() as conn:
        log = conn.execute(select(attempts).where(attempts.c.outbox_id == rid)).all()
    assert [(a.attempt, a.outcome, a.reply_code) for a in log] == [(1, "sent", 250)]


def test_expired_lease_is_reclaimed_and_late_completion_is_fenced(engine: Engine) -> None:
    (rid,) = add(engine, 1)
    (old,) = claim(engine, owner="w-dead")
    expire_leases(engine)
    (new,) = claim(engine, owner="w-new")
    assert new.id == rid
    assert new.reclaimed
    assert new.attempts == 2
    assert new.lease_token != old.lease_token
    with engine.begin() as conn:
        assert outcomes.complete(conn, [sent(old, worker="w-dead")]) == [rid]
    row = status_of(engine, rid)
    assert row["status"] == "sending"
    assert row["lease_token"] == new.lease_token
    with engine.begin() as conn:
        assert outcomes.complete(conn, [sent(new, worker="w-new")]) == []
    assert status_of(engine, rid)["status"] == "sent"
    with engine.connect() as conn:
        log = conn.execute(
            select(attempts.c.attempt, attempts.c.outcome, attempts.c.worker)
            .where(attempts.c.outbox_id == rid).order_by(attempts.c.id)
        ).all()
    # the abandoned attempt is unknown; the fenced one is still logged, as it happened
    assert [tuple(r) for r in log] == [
        (1, "unknown", "w-dead"), (1, "sent", "w-dead"), (2, "sent", "w-new")
    ]


def test_retry_completion_schedules_on_the_database_clock(engine: Engine) -> None:
    (rid,) = add(engine, 1)
    (c,) = claim(engine)
    retry = Completion(id=c.id, lease_token=c.lease_token, attempt=1, outcome=Outcome.RETRY,
                       status=Status.PENDING, started_at=c.claimed_at, worker="w1",
                       recipient=c.recipient, delay_seconds=90, reply_code=451,
                       reply_text="4.3.0 try later")
    with engine.begin() as conn:
        outcomes.complete(conn, [retry])
    row = status_of(engine, rid)
    assert row["status"] == "pending"
    assert row["attempts"] == 1
    assert row["last_reply_code"] == 451
    assert row["last_reply_text"] == "4.3.0 try later"
    delay = (row["next_attempt_at"] - row["last_attempt_at"]).total_seconds()  # type: ignore[operator]
    assert 89 <= delay <= 91
    assert claim(engine) == []


def test_paused_completion_is_not_charged(engine: Engine) -> None:
    (rid,) = add(engine, 1)
    (c,) = claim(engine)
    paused = Completion(id=c.id, lease_token=c.lease_token, attempt=1, outcome=Outcome.PAUSED,
                        status=Status.PENDING, started_at=c.claimed_at, worker="w1",
                        recipient=c.recipient, delay_seconds=0, uncharge=True, reply_code=535)
    with engine.begin() as conn:
        outcomes.complete(conn, [paused])
    row = status_of(engine, rid)
    assert row["status"] == "pending"
    assert row["attempts"] == 0


def test_an_outage_attempt_is_logged_as_not_charged(engine: Engine) -> None:
    first, second = add(engine, 2)
    a, b = claim(engine)

    def ended(c: ClaimedMessage, outcome: Outcome, uncharge: bool) -> Completion:
        return Completion(id=c.id, lease_token=c.lease_token, attempt=1, outcome=outcome,
                          status=Status.PENDING, started_at=c.claimed_at, worker="w1",
                          recipient=c.recipient, delay_seconds=0, uncharge=uncharge,
                          stage="connect", reason="connect_refused")

    with engine.begin() as conn:  # one batch: PostgreSQL's one-statement path
        outcomes.complete(conn, [ended(a, Outcome.OUTAGE, True), ended(b, Outcome.RETRY, False)])
    assert status_of(engine, first)["attempts"] == 0
    assert status_of(engine, second)["attempts"] == 1
    with engine.connect() as conn:
        (outage,) = operator.attempt_log(conn, first)
        (retry,) = operator.attempt_log(conn, second)
    assert (outage.outcome, outage.charged) == ("outage", False)
    assert (retry.outcome, retry.charged) == ("retry", True)


def test_release_and_extend(engine: Engine) -> None:
    add(engine, 2)
    a, b = claim(engine, lease=30)
    before = status_of(engine, a.id)["lease_expires_at"]
    with engine.begin() as conn:
        assert leasing.extend_leases(conn, [(a.id, a.lease_token), (b.id, "wrong")], 300) == 1
    assert status_of(engine, a.id)["lease_expires_at"] > before  # type: ignore[operator]
    with engine.begin() as conn:
        assert leasing.release(conn, [(b.id, b.lease_token)]) == 1
    row = status_of(engine, b.id)
    assert row["status"] == "pending"
    assert row["attempts"] == 0
    assert [m.id for m in claim(engine)] == [b.id]


def test_next_due_in(engine: Engine) -> None:
    with engine.connect() as conn:
        assert leasing.next_due_in(conn) is None
    (rid,) = add(engine, 1)
    with engine.connect() as conn:
        assert leasing.next_due_in(conn) == pytest.approx(0, abs=0.01)
    with engine.begin() as conn:
        conn.execute(update(messages).values(next_attempt_at=datetime(2099, 1, 1, tzinfo=UTC)))
    with engine.connect() as conn:
        assert leasing.next_due_in(conn) > 1e6  # type: ignore[operator]
    assert rid


def test_a_batch_completes_held_rows_and_fences_the_rest(engine: Engine) -> None:
    """One batch: rows still held are completed, a row whose lease another worker
    took over is left to it, and every attempt is logged (the batch statement on
    PostgreSQL and MySQL, row by row on SQLite)."""
    add(engine, 3)
    first = claim(engine, limit=3)
    expire_leases(engine)
    taken = claim(engine, limit=1, owner="w2")  # the oldest expired lease: first[0]
    assert [m.id for m in taken] == [first[0].id]
    bounced = Completion(id=first[2].id, lease_token=first[2].lease_token,
                         attempt=first[2].attempts, outcome=Outcome.FAILED,
                         status=Status.FAILED, started_at=first[2].claimed_at, worker="w1",
                         recipient=first[2].recipient, reply_code=550,
                         reply_text="5.1.1 no such user", reason="recipient_rejected")
    with engine.begin() as conn:
        fenced = outcomes.complete(conn, [sent(first[0]), sent(first[1]), bounced])
    assert fenced == [first[0].id]
    assert status_of(engine, first[0].id)["lease_owner"] == "w2"  # untouched
    one, two = status_of(engine, first[1].id), status_of(engine, first[2].id)
    assert (one["status"], one["provider_message_id"], one["lease_token"]) == (
        "sent", "ABC", None)
    assert one["sent_at"] is not None
    assert (two["status"], two["reason"], two["last_reply_code"]) == (
        "failed", "recipient_rejected", 550)
    assert two["sent_at"] is None
    assert two["finished_at"] is not None
    with engine.connect() as conn:
        logged = conn.execute(select(attempts.c.outbox_id, attempts.c.outcome,
                                     attempts.c.detail).order_by(attempts.c.id)).all()
    assert [(r.outbox_id, r.outcome) for r in logged] == [
        (first[0].id, "unknown"),  # logged by w2's claim, which took the row over
        (first[0].id, "sent"), (first[1].id, "sent"), (first[2].id, "failed")]
    assert "lease lost" in (logged[1].detail or "")


@pytest.mark.parametrize("batch", [1, 3])
def test_a_give_up_parked_after_an_unknown_outcome_keeps_that_in_its_reason(
        engine: Engine, batch: int) -> None:
    """Completion.parked_after_unknown is stored as the reason operators read
    (``max_attempts_after_unknown``, docs/operations.md), one row or a batch."""
    ids = add(engine, batch)
    done = [Completion(id=c.id, lease_token=c.lease_token, attempt=c.attempts,
                       outcome=Outcome.DEAD, status=Status.UNKNOWN, started_at=c.claimed_at,
                       worker="w1", recipient=c.recipient, reason="max_attempts",
                       parked_after_unknown=True)
            for c in claim(engine, limit=batch)]
    with engine.begin() as conn:
        assert outcomes.complete(conn, done) == []
    for rid in ids:
        row = status_of(engine, rid)
        assert (row["status"], row["reason"]) == ("unknown", "max_attempts_after_unknown")
