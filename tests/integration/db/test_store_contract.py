"""The store contract: every database's store passes the same suite (as River's drivers
do, and as mailout's transports do in tests/integration/transports/test_contract.py).

Each test asks the store of a real database (SQLite, PostgreSQL, MariaDB: the ``engine``
fixture is parametrized over ``db_fixtures.BACKENDS``; MariaDB skips, saying so, when
``MAILOUT_TEST_MYSQL_URL`` is unset) through the :class:`~mailout.db.stores.base.Store`
protocol alone, and checks what it wrote. A new database joins with a store module and
a fixture backend.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, select, update

from mailout import db
from mailout.db.schema import attempts, messages, suppressions
from mailout.db.stores import Store, store_for
from mailout.db.stores.completing import LEASE_LOST
from mailout.models import ClaimedMessage, Completion, Outcome, Status
from mailout.outbox import EnqueueSettings, Message, _validated_row
from tests.support.timetravel import expire_leases, make_due

SETTINGS = EnqueueSettings(message_id_domain="test.example.com")
NO_FILTER: dict[str, Any] = {"queues": None, "exclude_queues": (), "exclude_templates": (),
                             "expired_only": False}


def rows(*keys: str, queue: str = "default", priority: int = 0) -> dict[str, Mapping[str, Any]]:
    """Validated outbox rows by key, as the enqueue path hands them to a store."""
    return {k: _validated_row(Message(to=f"{k}@example.com", subject="Hi", text="x", key=k,
                                      queue=queue, priority=priority), SETTINGS)
            for k in keys}


def insert(engine: Engine, *keys: str, **kw: Any) -> list[int]:
    with engine.begin() as conn:
        stored = store_for(conn).insert(conn, rows(*keys, **kw), False)
    return [stored[k].id for k in keys]


def claim(engine: Engine, limit: int = 10, owner: str = "w1",
          **filters: Any) -> list[ClaimedMessage]:
    params = {"owner": owner, "token": str(uuid.uuid4()), "lease": 60.0, "limit": limit,
              "transport": "smtp"}
    with db.immediate(engine) as conn:
        return store_for(conn).claim(conn, params, **{**NO_FILTER, **filters})


def complete(engine: Engine, *batch: Completion) -> list[int]:
    with engine.begin() as conn:
        return store_for(conn).complete(conn, list(batch))


def ended(c: ClaimedMessage, outcome: Outcome = Outcome.SENT, status: Status = Status.SENT,
          **kw: Any) -> Completion:
    return Completion(id=c.id, lease_token=c.lease_token, attempt=c.attempts, outcome=outcome,
                      status=status, started_at=c.claimed_at, worker="w1",
                      recipient=c.recipient, transport="smtp", **kw)


def row(engine: Engine, rid: int) -> dict[str, Any]:
    with engine.connect() as conn:
        return dict(conn.execute(select(messages).where(messages.c.id == rid)).one()._mapping)


def logged(engine: Engine, rid: int) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(
            select(attempts).where(attempts.c.outbox_id == rid).order_by(attempts.c.id))]


def test_the_store_is_found_from_an_engine_a_connection_and_a_url(engine: Engine) -> None:
    store: Store = store_for(engine)
    with engine.connect() as conn:
        assert store_for(conn) is store
    assert store_for(engine.url) is store
    assert store_for(engine.url.render_as_string(hide_password=False)) is store
    assert store.name == engine.dialect.name
    # Only PostgreSQL wakes workers by NOTIFY and claims in one statement.
    assert store.listens is store.claims_in_one_statement is (store.name == "postgresql")


def test_an_insert_writes_new_keys_in_order_and_reports_taken_ones(engine: Engine) -> None:
    first = insert(engine, "a", "b", "c")
    assert first == sorted(first)
    with engine.begin() as conn:
        again = store_for(conn).insert(conn, rows("b", "d"), False)
    assert (again["b"].id, again["b"].created) == (first[1], False)
    assert again["b"].content["recipient"] == "b@example.com"
    assert again["d"].created
    assert again["d"].id not in first
    assert row(engine, again["d"].id)["status"] == Status.PENDING.value


def test_one_row_inserted_alone_is_created_then_found(engine: Engine) -> None:
    [rid] = insert(engine, "solo")
    with engine.begin() as conn:
        found = store_for(conn).insert(conn, rows("solo"), True)  # notify: never fails
    assert (found["solo"].id, found["solo"].created) == (rid, False)


def test_a_claim_leases_due_rows_once_highest_priority_first(engine: Engine) -> None:
    low = insert(engine, "low")
    high = insert(engine, "high", priority=5)
    got = claim(engine, limit=1)
    assert [c.id for c in got] == high
    leased = row(engine, high[0])
    assert (leased["status"], leased["lease_owner"], leased["attempts"]) == (
        Status.SENDING.value, "w1", 1)
    assert [c.id for c in claim(engine)] == low
    assert claim(engine) == []


def test_a_claim_keeps_to_its_lane(engine: Engine) -> None:
    insert(engine, "d1")
    [bulk] = insert(engine, "b1", queue="bulk")
    assert claim(engine, queues=["default"], exclude_queues=["default"]) == []
    assert [c.id for c in claim(engine, queues=["bulk"])] == [bulk]


def test_a_claim_says_whether_the_recipient_is_suppressed(engine: Engine) -> None:
    insert(engine, "gone")
    with engine.begin() as conn:
        conn.execute(suppressions.insert().values(
            address="gone@example.com", reason="hard_bounce", created_by="test",
            created_at=datetime.now(UTC)))
    [c] = claim(engine)
    assert c.suppressed


def test_a_completion_writes_the_rules_and_logs_the_attempt(engine: Engine) -> None:
    insert(engine, "ok")
    [c] = claim(engine)
    fenced = complete(engine, ended(c, reply_code=250, reply_text="2.0.0 queued as X",
                                    provider_message_id="X", settled={"smtp": "X"}))
    assert fenced == []
    done = row(engine, c.id)
    assert done["status"] == Status.SENT.value
    assert (done["lease_token"], done["lease_owner"]) == (None, None)
    assert (done["last_reply_code"], done["provider_message_id"]) == (250, "X")
    assert done["sent_at"] is not None
    assert done["finished_at"] is not None
    [attempt] = logged(engine, c.id)
    assert (attempt["outcome"], attempt["reply_code"], attempt["charged"]) == ("sent", 250, True)


def test_a_retry_keeps_the_last_reply_and_schedules_later(engine: Engine) -> None:
    insert(engine, "retry")
    [c] = claim(engine)
    complete(engine, ended(c, Outcome.RETRY, Status.PENDING, reply_code=451,
                           reply_text="try later", delay_seconds=3600))
    expire_leases(engine)
    assert claim(engine) == []  # not due for an hour
    make_due(engine, [c.id])
    [again] = claim(engine)
    complete(engine, ended(again, Outcome.OUTAGE, Status.PENDING, delay_seconds=0,
                           uncharge=True))
    kept = row(engine, c.id)
    assert (kept["last_reply_code"], kept["last_reply_text"]) == (451, "try later")
    assert kept["attempts"] == 1  # the second attempt was given back
    assert [a["charged"] for a in logged(engine, c.id)] == [True, False]


def test_an_unknown_outcome_remembers_when_and_through_what(engine: Engine) -> None:
    insert(engine, "u1", "u2")
    first, second = claim(engine)
    fenced = complete(engine, ended(first, Outcome.UNKNOWN, Status.PENDING, delay_seconds=0),
                      ended(second))
    assert fenced == []
    unknown = row(engine, first.id)
    assert (unknown["unknown_attempts"], unknown["unknown_via"]) == (1, "smtp")
    assert unknown["unknown_since"] is not None
    assert row(engine, second.id)["status"] == Status.SENT.value


def test_a_completion_after_the_lease_moved_on_is_fenced_but_logged(engine: Engine) -> None:
    insert(engine, "late", "fine")
    late, fine = claim(engine, owner="w-old")
    expire_leases(engine, [late.id])
    [taken] = claim(engine, owner="w-new")
    assert taken.id == late.id
    fenced = complete(engine, ended(late), ended(fine))
    assert fenced == [late.id]
    assert row(engine, late.id)["lease_owner"] == "w-new"
    assert row(engine, fine.id)["status"] == Status.SENT.value
    assert logged(engine, late.id)[-1]["detail"] == LEASE_LOST


def test_a_batch_naming_a_row_twice_applies_the_first_and_fences_the_second(
        engine: Engine) -> None:
    insert(engine, "twice")
    [c] = claim(engine)
    fenced = complete(engine, ended(c), ended(c, Outcome.FAILED, Status.FAILED))
    assert fenced == [c.id]
    assert row(engine, c.id)["status"] == Status.SENT.value
    assert len(logged(engine, c.id)) == 2


def test_leases_are_extended_while_held_and_released_uncharged(engine: Engine) -> None:
    insert(engine, "l1", "l2")
    held = [(c.id, c.lease_token) for c in claim(engine)]
    with engine.begin() as conn:
        store = store_for(conn)
        assert store.extend_leases(conn, [*held, (held[0][0], "not-the-token")], 600) == 2
        assert store.extend_leases(conn, [], 600) == 0
        assert store.release(conn, held[:1]) == 1
    back = row(engine, held[0][0])
    assert (back["status"], back["attempts"], back["lease_token"]) == (
        Status.PENDING.value, 0, None)
    assert row(engine, held[1][0])["status"] == Status.SENDING.value


def test_operator_writes_report_what_they_changed(engine: Engine) -> None:
    ids = insert(engine, "o1", "o2", "o3")
    with engine.begin() as conn:
        store = store_for(conn)
        stmt = update(messages).where(messages.c.id.in_(ids[:2])).values(priority=9)
        assert sorted(store.updated_ids(conn, stmt, messages.c.id)) == ids[:2]
        values = {"address": "x@example.com", "reason": "complaint", "created_by": "test",
                  "created_at": datetime.now(UTC)}
        assert store.insert_new_row(conn, suppressions, ["address"], values) is not None
        assert store.insert_new_row(conn, suppressions, ["address"], values) is None


def test_the_write_lock_is_taken_inside_a_transaction_and_errors_are_told_apart(
        engine: Engine) -> None:
    insert(engine, "w")
    with engine.connect() as conn, conn.begin():
        store = store_for(conn)
        store.take_write_lock(conn)  # a no-op where rows are locked as written
        assert store.updated_ids(conn, update(messages).values(priority=1),
                                 messages.c.id) != []
    assert not store_for(engine).is_conflict(ValueError("not a database error"))
