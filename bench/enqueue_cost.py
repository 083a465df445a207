"""What an enqueue adds to a business transaction, on PostgreSQL, against a bare INSERT.

1. One connection. Each transaction inserts one business row (an order) and then
   either nothing more, a hand-written INSERT of the same outbox row enqueue writes
   (no validation, no NOTIFY), ``enqueue()`` without NOTIFY, or ``enqueue()`` with its
   NOTIFY in the transaction (``MAILOUT_NOTIFY=in-transaction``; the default sends it
   after the commit, see bench/commit_tax.py). The four kinds alternate in blocks of
   ``--block`` transactions so that drift in the machine's speed hits all alike. Prints
   the time each adds to the order-only transaction and the ratio of enqueue's addition
   to the bare INSERT's (target <= 1.25); client CPU is the median over each kind's
   blocks of the block's mean, so that a block slowed by another process's burst does not move it.
2. ``--clients`` processes (default 16), each with its own connection, run the same
   order + outbox transactions as fast as they can for ``--seconds``; the kinds
   alternate in rounds, and each prints transactions per second over all clients.
   PostgreSQL serialises the commits of transactions that NOTIFY (a database-wide
   lock held through the commit's WAL flush); this shows what that costs.
3. ``--instructions SRC [SRC ...]``: instead of 1 and 2, the client's instructions
   per transaction of each kind, counted by valgrind for each source tree given (this
   checkout's ``src``, an older commit's...): a before/after figure the load of a
   shared machine cannot move. See :func:`count_instructions`. A tree may be several
   folders (``src:bench/support/otel_sdk``: an OpenTelemetry SDK), as PYTHONPATH;
   ``--in-span`` runs every transaction inside a request span (the application's), so
   that under an SDK enqueue opens its ``create`` span.

    .venv/bin/python -m bench.enqueue_cost [--transactions 4000] [--clients 16] [--seconds 5]
    .venv/bin/python -m bench.enqueue_cost --instructions /tmp/main/src src
    .venv/bin/python -m bench.enqueue_cost --in-span --instructions src src:bench/support/otel_sdk
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
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

from bench.common import callgrind, scratch_database
from mailout import db
from mailout.db import migrate
from mailout.outbox import EnqueueSettings, NotifyMode, enqueue

meta = MetaData()
orders = Table("orders", meta, Column("id", BigInteger, primary_key=True),
               Column("customer", String(100)), Column("total_cents", Integer))
SETTINGS = EnqueueSettings(message_id_domain="shop.example.com",
                           notify=NotifyMode.IN_TRANSACTION)
QUIET = EnqueueSettings(message_id_domain="shop.example.com", notify=NotifyMode.OFF)
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
    """Per kind: each transaction's wall time, and each block's mean CPU time of this
    process per transaction (the application's side of the cost: the wall time of one
    connection is mostly the commit's WAL flush, the same for every kind). ``total``
    transactions in all, a quarter of them per kind."""
    engine = db.make_engine(url)
    times: dict[str, list[float]] = {k: [] for k in KINDS}
    cpu: dict[str, list[float]] = {k: [] for k in KINDS}
    n = 0
    for b in range(-len(KINDS), total // block):
        kind = KINDS[b % len(KINDS)]
        size = warmup // len(KINDS) if b < 0 else block  # the first blocks only warm up
        c0 = time.thread_time()
        for _ in range(size):
            n += 1
            t0 = time.perf_counter()
            _transaction(engine, kind, n)
            if b >= 0:
                times[kind].append(time.perf_counter() - t0)
        if b >= 0:
            cpu[kind].append((time.thread_time() - c0) / size)
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
    ap.add_argument("--transactions", type=int, default=4000,
                    help="one-connection transactions in all, a quarter per kind")
    ap.add_argument("--block", type=int, default=50,
                    help="transactions per block; the kinds alternate by block")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--instructions", nargs="+", metavar="SRC",
                    help="count instructions per transaction under valgrind for each "
                         "source tree instead (e.g. /tmp/main/src src)")
    ap.add_argument("-n", type=int, default=300,
                    help="--instructions: transactions counted per kind (default 300)")
    ap.add_argument("--in-span", action="store_true",
                    help="--instructions: each transaction inside a request span")
    ap.add_argument("--child", nargs=4, metavar=("URL", "KIND", "N", "FIRST"),
                    help=argparse.SUPPRESS)  # one counted run, under valgrind
    args = ap.parse_args()
    if args.child:
        _count_child(args.child[0], int(args.child[1]), int(args.child[2]),
                     int(args.child[3]))
        return
    if args.instructions:
        count_instructions(args.instructions, args.n, in_span=args.in_span)
        return
    load = [os.getloadavg()[0]]
    with scratch_database() as url:
        _prepare(url)
        times, cpu = single(url, args.transactions, args.block)
        load.append(os.getloadavg()[0])
        rates = concurrent(url, args.clients, args.seconds, args.rounds, base=10**9) \
            if args.clients else {}
        load.append(os.getloadavg()[0])
    _report(times, cpu, rates, args, load)


def _prepare(url: str) -> None:
    engine = db.make_engine(url)
    migrate.upgrade(engine)
    meta.create_all(engine)
    engine.dispose()


_COLLECTED = re.compile(r"Collected : (\d+)")
IN_SPAN = "BENCH_ENQUEUE_IN_SPAN"  # set for the counted children of --in-span
WARMUP = 30  # transactions of each kind before counting: caches, prepared statements


def count_instructions(srcs: list[str], n: int, *, in_span: bool = False) -> None:
    """Per source tree: the client's instructions per transaction of each kind, and
    what each adds to the order-only one. Each kind runs in a process of its own
    under ``valgrind --tool=callgrind`` (about 50 times slower), after WARMUP
    transactions of every kind; a run with the warm-up only is subtracted, so start-up
    and imports do not count. The objects of start-up and warm-up are frozen out of
    the garbage collector (``gc.freeze``), whose full collections would land in some
    runs and not others. PostgreSQL's work is another process's: not counted."""
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    found: dict[str, dict[str, float]] = {}
    with scratch_database() as url, tempfile.TemporaryDirectory() as tmp:
        _prepare(url)
        for i, src in enumerate(srcs):
            print(f"counting {src} ({len(KINDS) + 1} runs under valgrind)...", flush=True)
            path = os.pathsep.join(str(Path(p).resolve()) for p in src.split(os.pathsep))
            env = {**os.environ, "PYTHONPATH": path,
                   "PYTHONHASHSEED": "0"}  # the same dict layouts in every run
            if in_span:
                env[IN_SPAN] = "1"
            runs = [_callgrind(env, Path(tmp) / f"{i}-{k}.out",
                               [url, str(k), str(0 if k < 0 else n),
                                str((i * 8 + k + 2) * 10_000_000)])
                    for k in range(-1, len(KINDS))]
            found[src] = {kind: (runs[k + 1] - runs[0]) / n for k, kind in enumerate(KINDS)}
    print(f"\nclient instructions per transaction (valgrind, N={n} per kind; the machine's "
          f"load average {os.getloadavg()[0]:.1f} does not matter here)")
    print(f"{'':<28}" + "".join(f"{s[-18:]:>20}" for s in srcs))
    for kind in KINDS:
        print(f"{kind:<28}" + "".join(f"{found[s][kind]:>20,.0f}" for s in srcs))
    for kind in KINDS[2:]:
        ratios = [(found[s][kind] - found[s][KINDS[0]]) / (found[s][KINDS[1]] - found[s][KINDS[0]])
                  for s in srcs]
        print(f"{kind + ' adds, x bare':<28}" + "".join(f"{r:>19.2f}x" for r in ratios))


def _callgrind(env: dict[str, str], out: Path, child: list[str]) -> int:
    """Instructions of one ``--child`` run under callgrind."""
    return callgrind(["-m", "bench.enqueue_cost", "--child", *child], env, out)


def _count_child(url: str, kind: int, n: int, first: int) -> None:
    """WARMUP transactions of every kind, then ``n`` of KINDS[kind] (none when < 0)."""
    engine = db.make_engine(url)
    run = _in_span if os.environ.get(IN_SPAN) else _transaction
    for warm in KINDS:
        for _ in range(WARMUP):
            first += 1
            run(engine, warm, first)
    # Objects alive now are never collected again: a full collection landing in one
    # run and not in another would otherwise move a run by millions of instructions.
    gc.collect()
    gc.freeze()
    for _ in range(n if kind >= 0 else 0):
        first += 1
        run(engine, KINDS[kind], first)
    engine.dispose()


def _in_span(engine: Engine, kind: str, n: int) -> None:
    """One transaction inside the application's request span (``--in-span``)."""
    from opentelemetry import trace  # only here: the other runs never load it
    with trace.get_tracer("bench").start_as_current_span("POST /checkout"):
        _transaction(engine, kind, n)


def _report(times: dict[str, list[float]], cpu: dict[str, list[float]],
            rates: dict[str, list[float]], args: argparse.Namespace,
            load: list[float]) -> None:
    def ms(xs: list[float]) -> float:
        return statistics.median(xs) * 1000

    print(f"load average (1 min) {', '.join(f'{x:.1f}' for x in load)}")
    print(f"\none connection, {args.transactions} transactions, "
          f"{args.transactions // len(KINDS)} per kind")
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
    print(f"\n{'client CPU per transaction':<28}{'median us':>10}{'adds us':>9}{'mean us':>9}"
          f"   (over {len(cpu[KINDS[0]])} blocks of {args.block} per kind)")
    base_cpu = statistics.median(cpu[KINDS[0]]) * 1e6
    added_cpu = {k: statistics.median(cpu[k]) * 1e6 - base_cpu for k in KINDS}
    for kind in KINDS:
        print(f"{kind:<28}{statistics.median(cpu[kind]) * 1e6:>10.0f}{added_cpu[kind]:>+9.0f}"
              f"{statistics.fmean(cpu[kind]) * 1e6:>9.0f}")
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
