"""Stores side by side: the same drain and claims on PostgreSQL and on MariaDB/MySQL.

PostgreSQL and MariaDB from bench/common.py, Postfix's ``smtp-sink`` on loopback, one
run, one table, the MariaDB/PostgreSQL ratio in the last column:

1. Enqueue and drain: N messages enqueued with ``enqueue_many`` (1,000 per
   transaction), rendered from a template (~2 KB text and HTML) and drained by
   ``mailout worker --until-idle``, 1 process and then 2 processes started together.
   "wall" is from process start to the last exit; "steady" is sent rows over the
   database-clock span from the first claim to the last ``sent_at``.
2. Claim latency: claiming a batch of 10 and of 100 (each committed) out of a backlog
   of pending rows, with ``--history`` finished rows in the table: median and p95.
3. Pick-up latency: one worker idle on an empty outbox, messages enqueued one at a
   time (each committed) every 0.3 s; commit to the claim (``first_attempt_at``, on
   the database clock): NOTIFY wakes the worker on PostgreSQL, MariaDB waits for the
   next poll (``MAILOUT_POLL_SECONDS``, 0.2 s by default).

    .venv/bin/python -m bench.stores [-n 5000] [--history 20000] [--pickups 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, func, select, update

from bench.common import (
    MAIL_FROM,
    TEMPLATE,
    params,
    run_workers,
    scratch_database,
    scratch_mysql_database,
    smtp_sink,
    worker_env,
    write_templates,
)
from mailout import db
from mailout.db import leasing, migrate
from mailout.db.schema import messages
from mailout.outbox import EnqueueSettings, Message, enqueue, enqueue_many

CHUNK = 1_000
CLAIM_REPS = 30
STORES: dict[str, Callable[[], AbstractContextManager[str]]] = {
    "PostgreSQL": scratch_database,
    "MariaDB": scratch_mysql_database,
}


def settings(templates: Path) -> EnqueueSettings:
    return EnqueueSettings(templates_dir=templates, message_id_domain="shop.example.com")


def fill(engine: Engine, n: int, templates: Path, tag: str) -> float:
    """Enqueue ``n`` messages, ``CHUNK`` per transaction; the rate, msg/s."""
    cfg = settings(templates)
    t0 = time.perf_counter()
    for start in range(0, n, CHUNK):
        with engine.begin() as conn:
            enqueue_many(conn, [Message(to=f"c{i}@example.com", template=TEMPLATE,
                                        params=params(i), key=f"{tag}-{i}")
                                for i in range(start, min(n, start + CHUNK))], settings=cfg)
    return n / (time.perf_counter() - t0)


def reset(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(messages.delete())


def drain(engine: Engine, url: str, port: int, templates: Path, n: int,
          processes: int) -> tuple[float, float, float]:
    """(enqueue msg/s, wall msg/s, steady msg/s) for ``processes`` workers draining
    ``n`` messages."""
    reset(engine)
    enqueued = fill(engine, n, templates, f"d{processes}")
    run = run_workers(worker_env(url, port, templates, concurrency=10), processes)
    with engine.connect() as conn:
        sent, first, last = conn.execute(
            select(func.count(), func.min(messages.c.first_attempt_at),
                   func.max(messages.c.sent_at)).where(messages.c.status == "sent")).one()
    assert sent == n, f"{sent} of {n} sent"
    return enqueued, n / run.wall, n / max((last - first).total_seconds(), 1e-6)


def claim_latency(engine: Engine, templates: Path, history: int,
                  batch: int) -> tuple[float, float]:
    """(median, p95) milliseconds of one committed claim of ``batch`` rows."""
    reset(engine)
    fill(engine, history, templates, "h")
    with engine.begin() as conn:  # the history: finished rows kept for idempotency
        conn.execute(update(messages).values(status="sent", finished_at=func.now()))
    fill(engine, batch * CLAIM_REPS, templates, f"c{batch}")
    times = []
    for _ in range(CLAIM_REPS):
        t0 = time.perf_counter()
        got = db.immediate_retrying(engine, lambda conn: leasing.claim(
            conn, owner="bench", limit=batch, lease_seconds=60))
        times.append((time.perf_counter() - t0) * 1000)
        assert len(got) == batch, len(got)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95) - 1]


def pickup_latency(engine: Engine, url: str, port: int, templates: Path,
                   count: int) -> tuple[float, float]:
    """(median, p95) milliseconds from an enqueue's commit to its claim, idle worker."""
    reset(engine)
    env = {**worker_env(url, port, templates, concurrency=10), "MAIL_FROM": MAIL_FROM}
    worker = subprocess.Popen([sys.executable, "-m", "mailout", "worker"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)  # started, listening or polling, outbox empty
        cfg = settings(templates)
        committed: dict[int, datetime] = {}
        for i in range(count):
            with engine.begin() as conn:
                rid = enqueue(conn, to=f"p{i}@example.com", template=TEMPLATE,
                              params=params(i), key=f"p-{i}", settings=cfg).id
            committed[rid] = datetime.now(UTC)
            time.sleep(0.3)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                claimed = dict(conn.execute(
                    select(messages.c.id, messages.c.first_attempt_at)
                    .where(messages.c.first_attempt_at.is_not(None))).all())
            if len(claimed) == count:
                break
            time.sleep(0.1)
    finally:
        worker.terminate()
        worker.wait(30)
    ms = sorted((_utc(claimed[rid]) - at).total_seconds() * 1000
                for rid, at in committed.items())
    return statistics.median(ms), ms[int(len(ms) * 0.95) - 1]


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def measure(url: str, port: int, templates: Path, args: argparse.Namespace) -> dict[str, float]:
    engine = db.make_engine(url)
    migrate.upgrade(engine)
    out: dict[str, float] = {}
    try:
        for processes in (1, 2):
            enqueued, wall, steady = drain(engine, url, port, templates, args.n, processes)
            if processes == 1:
                out[f"enqueue_many, {CHUNK} per transaction, msg/s"] = enqueued
            out[f"drain, {processes} process(es), wall msg/s"] = wall
            out[f"drain, {processes} process(es), steady msg/s"] = steady
        for batch in (10, 100):
            median, p95 = claim_latency(engine, templates, args.history, batch)
            out[f"claim {batch} of a backlog, median ms"] = median
            out[f"claim {batch} of a backlog, p95 ms"] = p95
        median, p95 = pickup_latency(engine, url, port, templates, args.pickups)
        out["idle pick-up (commit to claim), median ms"] = median
        out["idle pick-up (commit to claim), p95 ms"] = p95
    finally:
        engine.dispose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5_000, help="messages per drain")
    parser.add_argument("--history", type=int, default=20_000, help="finished rows in claims")
    parser.add_argument("--pickups", type=int, default=30, help="messages for pick-up latency")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp, smtp_sink() as port:
        templates = write_templates(Path(tmp) / "templates")
        for name, scratch in STORES.items():
            with scratch() as url:
                results[name] = measure(url, port, templates, args)
    print(f"\nStores side by side: n={args.n}, history={args.history}, "
          f"pickups={args.pickups}, {os.cpu_count()} CPUs")
    pg, my = results["PostgreSQL"], results["MariaDB"]
    print(f"{'':48} {'PostgreSQL':>11} {'MariaDB':>11} {'MariaDB/PG':>11}")
    for key in pg:
        print(f"{key:48} {pg[key]:11.1f} {my[key]:11.1f} {my[key] / pg[key]:11.2f}")




if __name__ == "__main__":
    main()
