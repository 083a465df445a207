"""What an enqueue adds to a business transaction, on PostgreSQL, against a bare INSERT.

1. One connection. Each transaction inserts one business row (an order) and then
   either nothing more, a hand-written INSERT of the same outbox row enqueue writes
   (no validation, no NOTIFY), ``enqueue()`` without NOTIFY, or ``enqueue()`` with it
   (the default). The four kinds alternate in blocks so that drift in the machine's
   speed hits all alike. Prints the time each adds to the order-only transaction and
   the ratio of enqueue's addition to the bare INSERT's (target <= 1.25).
2. ``--clients`` processes (default 16), each with its own connection, run the same
   order + outbox transactions as fast as they can for ``--seconds``; the kinds
   alternate in rounds, and each prints transactions per second over all clients.
   PostgreSQL serialises the commits of transactions that NOTIFY (a database-wide
   lock held through the commit's WAL flush); this shows what that costs.

    .venv/bin/python -m bench.enqueue_cost [--transactions 4000] [--clients 16] [--seconds 5]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    insert,
    text,
)

from bench.common import scratch_database
from mailout import db
from mailout.db import migrate
from mailout.outbox import EnqueueSettings, enqueue

meta = MetaData()
orders = Table("orders", meta, Column("id", BigInteger, primary_key=True),
               Column("customer", String(100)), Column("total_cents", Integer))
SETTINGS = EnqueueSettings(message_id_domain="shop.example.com")
QUIET = EnqueueSettings(message_id_domain="shop.example.com", notify=False)
KINDS = ("order only", "+ bare INSERT", "+ enqueue, no NOTIFY", "+ enqueue (NOTIFY)")
TARGET_RATIO = 1.25

# The row enqueue writes for the call in _outbox, written by hand: the columns it sets,
# its database-clock times, its default age limit (3 days for the default queue).
BARE_INSERT = text("""
INSERT INTO mailout_messages (idempotency_key, queue, priority, status, recipient, template,
    params, message_id, addresses, created_at, next_attempt_at, expires_at)
VALUES (:key, 'default', 0, 'pending', :to, 'order_confirmation', CAST(:params AS jsonb),
    :message_id, NULL, clock_timestamp(), clock_timestamp(),
    clock_timestamp() + interval '3 days')
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id
""")


def _outbox(conn: Connection, kind: str, n: int) -> None:
    """The outbox write of one transaction of ``kind`` for order ``n``."""
    if kind == KINDS[0]:
        return
    if kind == KINDS[1]:
        conn.execute(BARE_INSERT, {
            "key": f"order-{n}-confirmation", "to": f"customer{n}@example.com",
            "params": f'{{"order_id": {n}, "total": "12.34", "items": ["a", "b"]}}',
            "message_id": f"<order{n}.{os.getpid()}@shop.example.com>"}).scalar_one()
        return
    enqueue(conn, to=f"customer{n}@example.com", template="order_confirmation",
            params={"order_id": n, "total": "12.34", "items": ["a", "b"]},
            key=f"order-{n}-confirmation", settings=SETTINGS if kind == KINDS[3] else QUIET)


def _transaction(engine: Engine, kind: str, n: int) -> None:
    with engine.begin() as conn:
        conn.execute(insert(orders).values(id=n, customer=f"c{n}", total_cents=n % 100_000))
        _outbox(conn, kind, n)


def single(url: str, total: int, block: int,
           warmup: int = 200) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per kind: each transaction's wall time, and this process's CPU time for it (the
    application's side of the cost: the wall time of one connection is mostly the
    commit's WAL flush, the same for every kind)."""
    engine = db.make_engine(url)
    times: dict[str, list[float]] = {k: [] for k in KINDS}
    cpu: dict[str, list[float]] = {k: [] for k in KINDS}
    n = 0
    for b in range(-len(KINDS), total // block):
        kind = KINDS[b % len(KINDS)]
        size = warmup // len(KINDS) if b < 0 else block  # the first blocks only warm up
        for _ in range(size):
            n += 1
            t0, c0 = time.perf_counter(), time.thread_time()
            _transaction(engine, kind, n)
            if b >= 0:
                times[kind].append(time.perf_counter() - t0)
                cpu[kind].append(time.thread_time() - c0)
    engine.dispose()
    return times, cpu


def _client(url: str, kind: str, first: int, seconds: float, ready: Any, go: Any,
            done: Any) -> None:
    engine = db.make_engine(url)
    _transaction(engine, KINDS[0], first)  # connect (and import) before the clock starts
    ready.put(1)
    go.wait()
    n = first + 1
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        _transaction(engine, kind, n)
        n += 1
    engine.dispose()
    done.put(n - first - 1)


def concurrent(url: str, clients: int, seconds: float, rounds: int,
               base: int) -> dict[str, list[float]]:
    """Transactions per second over ``clients`` processes, per kind, one per round.
    Every client starts together, once all have connected, and runs ``seconds``."""
    rates: dict[str, list[float]] = {k: [] for k in KINDS[1:]}
    ctx = multiprocessing.get_context("spawn")
    for r in range(rounds):
        for i, kind in enumerate(KINDS[1:]):
            ready, done, go = ctx.Queue(), ctx.Queue(), ctx.Event()
            offset = base + (r * len(KINDS) + i) * clients * 10_000_000
            procs = [ctx.Process(target=_client, args=(url, kind, offset + c * 10_000_000,
                                                       seconds, ready, go, done))
                     for c in range(clients)]
            for p in procs:
                p.start()
            for _ in procs:
                ready.get(timeout=300)
            go.set()
            total = sum(done.get(timeout=seconds + 300) for _ in procs)
            for p in procs:
                p.join(30)
            rates[kind].append(total / seconds)
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--transactions", type=int, default=4000)
    ap.add_argument("--block", type=int, default=200)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    load = [os.getloadavg()[0]]
    with scratch_database() as url:
        engine = db.make_engine(url)
        migrate.upgrade(engine)
        meta.create_all(engine)
        engine.dispose()
        times, cpu = single(url, args.transactions, args.block)
        load.append(os.getloadavg()[0])
        rates = concurrent(url, args.clients, args.seconds, args.rounds, base=10**9) \
            if args.clients else {}
        load.append(os.getloadavg()[0])
    _report(times, cpu, rates, args, load)


def _report(times: dict[str, list[float]], cpu: dict[str, list[float]],
            rates: dict[str, list[float]], args: argparse.Namespace,
            load: list[float]) -> None:
    def ms(xs: list[float]) -> float:
        return statistics.median(xs) * 1000

    print(f"load average (1 min) {', '.join(f'{x:.1f}' for x in load)}")
    print(f"\none connection, {args.transactions} transactions per kind")
    print(f"{'transaction':<28}{'n':>6}{'p50 ms':>9}{'mean ms':>9}{'adds p50':>10}"
          f"{'adds mean':>11}")
    base_p50, base_mean = ms(times[KINDS[0]]), statistics.fmean(times[KINDS[0]]) * 1000
    added: dict[str, tuple[float, float]] = {}
    for kind in KINDS:
        p50, mean = ms(times[kind]), statistics.fmean(times[kind]) * 1000
        added[kind] = (p50 - base_p50, mean - base_mean)
        print(f"{kind:<28}{len(times[kind]):>6}{p50:>9.3f}{mean:>9.3f}"
              f"{added[kind][0]:>+10.3f}{added[kind][1]:>+11.3f}")
    bare = added[KINDS[1]]
    for kind in KINDS[2:]:
        p50_ratio, mean_ratio = added[kind][0] / bare[0], added[kind][1] / bare[1]
        print(f"{kind} adds {p50_ratio:.2f}x (p50), {mean_ratio:.2f}x (mean) what the bare "
              f"INSERT adds (target <= {TARGET_RATIO}x)")
    print(f"\n{'client CPU per transaction':<28}{'mean us':>9}{'adds us':>9}")
    base_cpu = statistics.fmean(cpu[KINDS[0]]) * 1e6
    added_cpu = {k: statistics.fmean(cpu[k]) * 1e6 - base_cpu for k in KINDS}
    for kind in KINDS:
        print(f"{kind:<28}{statistics.fmean(cpu[kind]) * 1e6:>9.0f}{added_cpu[kind]:>+9.0f}")
    for kind in KINDS[2:]:
        print(f"{kind} adds {added_cpu[kind] / added_cpu[KINDS[1]]:.2f}x the CPU the bare "
              f"INSERT adds (target <= {TARGET_RATIO}x)")
    if not rates:
        return
    print(f"\n{args.clients} connections, {args.seconds:.0f} s per round, {args.rounds} rounds "
          "interleaved: order + outbox transactions per second (all clients)")
    for kind, xs in rates.items():
        runs = ", ".join(f"{x:.0f}" for x in xs)
        print(f"{kind:<28}{statistics.median(xs):>9.0f}/s  (rounds: {runs})")
    quiet, loud = statistics.median(rates[KINDS[2]]), statistics.median(rates[KINDS[3]])
    print(f"NOTIFY costs {100 * (1 - loud / quiet):.1f}% of the throughput at "
          f"{args.clients} connections")


if __name__ == "__main__":
    main()
