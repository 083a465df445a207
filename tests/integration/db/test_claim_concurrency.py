"""Claims racing on real servers: many claimers, one owner per row, and a deadlock
is run again instead of surfacing."""

from __future__ import annotations

import threading

from sqlalchemy import Connection, select, update

from mailout import db
from mailout.db import leasing
from mailout.db.schema import messages
from mailout.outbox import EnqueueSettings, Message, enqueue_many

SETTINGS = EnqueueSettings(message_id_domain="test.example.com")
CLAIMERS = 8


def test_concurrent_claimers_never_take_one_row_twice(server_url: str) -> None:
    engine = db.make_engine(server_url, pool_size=CLAIMERS + 2)
    n = 400
    with engine.begin() as conn:
        enqueue_many(conn, [Message(to=f"u{i}@example.com", subject="Hi", text="x",
                                    key=f"k{i}", priority=i % 3) for i in range(n)],
                     settings=SETTINGS)
    claimed: list[list[int]] = [[] for _ in range(CLAIMERS)]
    errors: list[BaseException] = []
    start = threading.Barrier(CLAIMERS)

    def claimer(slot: int) -> None:
        try:
            start.wait()
            while True:
                got = db.immediate_retrying(engine, lambda conn: leasing.claim(
                    conn, owner=f"w{slot}", limit=7, lease_seconds=60))
                if not got:
                    return
                claimed[slot] += [m.id for m in got]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(CLAIMERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    every = [i for ids in claimed for i in ids]
    assert len(every) == len(set(every)) == n  # each row once, none left behind
    assert sum(1 for ids in claimed if ids) >= 2  # the claimers really overlapped
    with engine.connect() as conn:
        owners = dict(conn.execute(select(messages.c.id, messages.c.lease_owner)).all())
    for slot, ids in enumerate(claimed):
        assert {owners[i] for i in ids} <= {f"w{slot}"}
    engine.dispose()


def test_a_deadlock_victim_is_run_again(server_url: str) -> None:
    """Two transactions lock two rows in opposite orders: a real deadlock. The one
    the server rolls back is run again by immediate_retrying and then succeeds."""
    engine = db.make_engine(server_url)
    with engine.begin() as conn:
        ids = [r.id for r in enqueue_many(conn, [
            Message(to="a@example.com", subject="Hi", text="x", key="d1"),
            Message(to="b@example.com", subject="Hi", text="x", key="d2")],
            settings=SETTINGS)]
    both_hold_one = threading.Barrier(2, timeout=30)
    runs: dict[str, int] = {"first": 0, "second": 0}
    errors: list[BaseException] = []

    def touch(conn: Connection, rid: int) -> None:
        conn.execute(update(messages).where(messages.c.id == rid)
                     .values(priority=messages.c.priority + 1))

    def work(name: str, order: list[int]) -> None:
        def body(conn: Connection) -> None:
            runs[name] += 1
            touch(conn, order[0])
            if runs[name] == 1:
                both_hold_one.wait()  # only the first run meets the other one
            touch(conn, order[1])

        try:
            db.immediate_retrying(engine, body)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=("first", ids)),
               threading.Thread(target=work, args=("second", ids[::-1]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sum(runs.values()) >= 3  # a victim was rolled back and run again
    with engine.connect() as conn:
        priorities = conn.execute(select(messages.c.priority).order_by(messages.c.id)).scalars()
        assert list(priorities) == [2, 2]  # both transactions' work, each applied once
    engine.dispose()
