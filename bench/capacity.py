"""Capacity: what one message costs PostgreSQL, and how workers scale out against it.

Three measurements on a scratch database of the benchmark server (bench/common.py)
and Postfix's ``smtp-sink``:

1. Database cost per message while one worker (in this process) drains N template
   messages: statements and transactions it sends (counted by its engine), commits,
   rows inserted/updated/deleted and blocks (``pg_stat_database`` of the scratch
   database), WAL bytes (``pg_current_wal_lsn()`` before and after; WAL is counted
   for the whole server: run it on a quiet server for a clean figure), and the CPU
   of the worker's PostgreSQL backends (``/proc``: the server must run here).
2. Scale-out: ``--processes`` worker processes (default 8) drain N messages together.
   Checks that every row was sent exactly once (one ``sent`` attempt per row, no
   other attempt, no fenced completion) and, meanwhile, times single-row claims from
   a probe connection (claim, then release) to show claim latency under contention.
3. Purge while draining (bench/purge.py): one worker drains a backlog while a purge
   of ``--history`` old ``sent`` rows, at ``mailout purge``'s default batch and pause,
   is switched on and off in alternating windows; the two drain rates side by side.

    .venv/bin/python -m bench.capacity [-n 20000] [--processes 8] [--history 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event, func, select, text

from bench import purge as purge_bench
from bench.common import (
    run_workers,
    scratch_database,
    smtp_sink,
    stand_in_autovacuum,
    worker_env,
    write_templates,
)
from bench.throughput import analyze, fill, reset
from mailout import db
from mailout.db import leasing, migrate
from mailout.db.schema import attempts, messages
from mailout.worker import config
from mailout.worker.build import build_worker

COUNTERS = ("xact_commit", "tup_inserted", "tup_updated", "tup_deleted", "blks_hit",
            "blks_read")


@dataclass
class DbCost:
    per_message: dict[str, float]
    wal_bytes_per_message: float
    rate: float
    statements_per_message: float  # counted by the worker's engine
    transactions_per_message: float
    pg_cpu_per_message: float  # seconds of the worker's PostgreSQL backends
    worker_cpu_per_message: float  # seconds of the worker process (all its threads)


def _counters(engine: Engine) -> dict[str, float]:
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_stat_force_next_flush()"))
        row = conn.execute(text(
            f"SELECT {', '.join(COUNTERS)} FROM pg_stat_database "
            "WHERE datname = current_database()")).one()
        wal = conn.execute(text("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")).scalar_one()
    return {**{c: float(v) for c, v in zip(COUNTERS, row, strict=True)}, "wal": float(wal)}


def _backend_cpu(engine: Engine, pids: set[int]) -> float:
    """User + system CPU seconds so far of the database's backends other than the one
    asking (their /proc entries: the server runs on this machine), noting their pids."""
    with engine.connect() as conn:
        pids |= set(conn.execute(text(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'")).scalars())
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue  # gone: its CPU is lost, so backends are read while still open
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def db_cost(engine: Engine, env: dict[str, str], templates: Path, n: int) -> DbCost:
    """One worker drains ``n`` messages in this process, so that its engine can count
    the statements it sends and its backends stay open to be read at the end."""
    reset(engine)
    fill(engine, n, templates, "cost")
    analyze(engine)
    os.environ.update(env)
    settings = config.load()
    worker_engine = db.make_engine(settings.database_url)
    counts = {"statements": 0, "transactions": 0}

    def statement(*_args: Any) -> None:
        counts["statements"] += 1

    def commit(*_args: Any) -> None:
        counts["transactions"] += 1

    event.listen(worker_engine, "before_cursor_execute", statement)
    event.listen(worker_engine, "commit", commit)
    worker = build_worker(settings, engine=worker_engine, until_idle=True)
    time.sleep(1.0)  # let the fill's statistics reach pg_stat_database
    pids: set[int] = set()
    before, pg_before = _counters(engine), _backend_cpu(engine, pids)
    cpu0, t0 = time.process_time(), time.perf_counter()
    asyncio.run(worker.run())
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    pg = _backend_cpu(engine, pids) - pg_before
    worker.alerts.close()
    worker_engine.dispose()
    time.sleep(1.0)
    after = _counters(engine)
    diff = {k: (after[k] - before[k]) / n for k in COUNTERS}
    return DbCost(diff, (after["wal"] - before["wal"]) / n, n / wall,
                  counts["statements"] / n, counts["transactions"] / n, pg / n, cpu / n)


@dataclass
class ScaleOut:
    processes: int
    rate: float
    problems: list[str]
    claim_ms: list[float]


def _probe_claims(url: str, stop: threading.Event, out: list[float]) -> None:
    """Claim one row and give it back, over and over: claim latency under contention."""
    engine = db.make_engine(url)
    try:
        while not stop.is_set():
            with db.immediate(engine) as conn:
                t0 = time.perf_counter()
                got = leasing.claim(conn, owner="probe", limit=1, lease_seconds=60)
                out.append((time.perf_counter() - t0) * 1000)
                leasing.release(conn, [(m.id, m.lease_token) for m in got])
            time.sleep(0.01)
    finally:
        engine.dispose()


def scale_out(engine: Engine, url: str, env: dict[str, str], templates: Path, n: int,
              processes: int) -> ScaleOut:
    reset(engine)
    fill(engine, n, templates, "scale")
    analyze(engine)
    stop = threading.Event()
    claim_ms: list[float] = []
    probe = threading.Thread(target=_probe_claims, args=(url, stop, claim_ms), daemon=True)
    probe.start()
    run = run_workers(env, processes)
    stop.set()
    probe.join(10)
    return ScaleOut(processes, n / run.wall, _exactly_once_problems(engine, n), claim_ms)


def _exactly_once_problems(engine: Engine, n: int) -> list[str]:
    """Every row sent once: one attempt per row, and that attempt is the send."""
    problems = []
    with engine.connect() as conn:
        statuses: dict[str, int] = dict(conn.execute(
            select(messages.c.status, func.count()).group_by(messages.c.status)).all())
        per_row = conn.execute(
            select(attempts.c.outbox_id, func.count()).where(attempts.c.worker != "probe")
            .group_by(attempts.c.outbox_id).having(func.count() > 1)).all()
        sent_attempts = conn.execute(
            select(func.count()).where(attempts.c.outcome == "sent")).scalar_one()
    if statuses != {"sent": n}:
        problems.append(f"statuses {statuses}, expected {{'sent': {n}}}")
    if per_row:
        problems.append(f"{len(per_row)} rows attempted more than once, e.g. {per_row[:3]}")
    if sent_attempts != n:
        problems.append(f"{sent_attempts} sent attempts for {n} rows")
    return problems


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=20_000)
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=20)
    ap.add_argument("--history", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, scratch_database() as url, smtp_sink() as port:
        templates = write_templates(Path(tmp))
        engine = db.make_engine(url)
        migrate.upgrade(engine)
        env = worker_env(url, port, templates, args.concurrency)
        print(f"database cost of {args.n} messages, 1 worker...", flush=True)
        cost = db_cost(engine, env, templates, args.n)
        with stand_in_autovacuum(url) as vacuuming:
            print(f"{args.processes} workers on {args.n} messages...", flush=True)
            scale = scale_out(engine, url, env, templates, args.n, args.processes)
        purged: purge_bench.Result | None = None
        plan = purge_bench.Plan(history=args.history)
        if args.history:
            reset(engine)
            print(f"purging {args.history:,} rows while a worker drains...", flush=True)
            purged = purge_bench.measure(engine, url, env, templates, plan)
        engine.dispose()
    if vacuuming:
        print("\n(the server runs without autovacuum: during 2 the outbox table was "
              "vacuumed and analyzed every 5 s instead)")
    print(f"\nper message (1 worker in this process, {cost.rate:.0f} msg/s; load average "
          f"{os.getloadavg()[0]:.1f}):")
    print(f"  {'statements':<14}{cost.statements_per_message:>10.2f}  (sent by the worker)")
    print(f"  {'transactions':<14}{cost.transactions_per_message:>10.3f}  (its commits)")
    for name, value in cost.per_message.items():
        print(f"  {name:<14}{value:>10.2f}")
    print(f"  {'WAL bytes':<14}{cost.wal_bytes_per_message:>10.0f}  (whole server)")
    print(f"  {'PG CPU':<14}{cost.pg_cpu_per_message * 1e6:>10.0f}  us (the worker's backends)")
    print(f"  {'worker CPU':<14}{cost.worker_cpu_per_message * 1e6:>10.0f}  us (all its threads)")
    print(f"\n{scale.processes} worker processes: {scale.rate:.0f} msg/s; exactly once: "
          f"{'yes' if not scale.problems else 'NO'}")
    for problem in scale.problems:
        print("  PROBLEM:", problem)
    if scale.claim_ms:
        print(f"  probe claim latency under contention ({len(scale.claim_ms)} claims): "
              f"p50 {statistics.median(scale.claim_ms):.1f} ms, "
              f"p95 {_pct(scale.claim_ms, 0.95):.1f} ms, p99 {_pct(scale.claim_ms, 0.99):.1f} ms, "
              f"max {max(scale.claim_ms):.1f} ms")
    if purged is not None:
        purge_bench.report(purged, plan)
    sys.exit(1 if scale.problems else 0)


if __name__ == "__main__":
    main()
