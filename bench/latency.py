"""Latency of urgent mail: a login code must not wait behind a newsletter.

PostgreSQL and ``smtp-sink`` on loopback. Phase 1 drains a bulk backlog alone (the
bulk rate baseline). Phase 2, repeated ``--runs`` times: fill the backlog again and,
while the worker drains it, enqueue critical messages one at a time at random
intervals, each in its own transaction; each run's p99 is printed against the
100 ms target. Phase 3 does the same with the worker idle. Latency is commit
(measured here) to ``sent_at`` (the database clock when the worker recorded the
server's 250, so it slightly overstates the true figure).

``--lanes`` is MAILOUT_LANES; the default pins each lane to processes of its own
(``critical:4@1,bulk:16@2``: the critical lane alone in one process, bulk in two),
so bulk rendering never holds the critical lane's event loop. ``--lanes
critical:4,bulk:16`` is the old layout: both lanes in one process.

    .venv/bin/python -m bench.latency [-n 50000] [--critical 200] [--runs 3] [--lanes ...]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, func, select

from bench.common import scratch_database, smtp_sink, stand_in_autovacuum
from mailout import db
from mailout.db import migrate, pauses
from mailout.db.schema import messages
from mailout.outbox import EnqueueSettings, Message, enqueue, enqueue_many

SETTINGS = EnqueueSettings(message_id_domain="bench.example.com")
LANES = "critical:4@1,bulk:16@2"
TARGET_P99_MS = 100.0


def fill_bulk(engine: Engine, n: int, tag: str) -> None:
    """Enqueue the backlog with the bulk queue paused, so the drain is timed alone."""
    with engine.begin() as conn:
        pauses.set_pause(conn, "queue", "bulk", "benchmark fill")
    for start in range(0, n, 5000):
        batch = [Message(to=f"news{i}@example.com", subject="Our newsletter",
                         text="Hello " * 300, key=f"{tag}-{i}", queue="bulk")
                 for i in range(start, min(n, start + 5000))]
        with engine.begin() as conn:
            enqueue_many(conn, batch, settings=SETTINGS)
    time.sleep(2.5)  # the workers' pause cache (2 s) has certainly seen the pause


def release_bulk(engine: Engine) -> None:
    with engine.begin() as conn:
        pauses.clear_pause(conn, "queue", "bulk")


def start_worker(url: str, port: int, lanes: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MAILOUT_DATABASE_URL": url, "MAIL_FROM": "shop@example.com",
           "SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(port), "SMTP_TLS": "none",
           "MAILOUT_LANES": lanes}
    exe = Path(sys.executable).parent / "mailout"
    return subprocess.Popen([str(exe), "worker"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def count(engine: Engine, queue: str, status: str = "sent") -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).where(
            messages.c.queue == queue, messages.c.status == status)).scalar_one())


def wait_drained(engine: Engine, queue: str, n: int) -> float:
    t0 = time.perf_counter()
    while count(engine, queue) < n:
        time.sleep(0.1)
    return time.perf_counter() - t0


def send_critical(engine: Engine, n: int, tag: str,
                  rng: random.Random) -> list[tuple[int, float]]:
    commits: list[tuple[int, float]] = []
    for i in range(n):
        time.sleep(rng.uniform(0.02, 0.15))
        with engine.begin() as conn:
            rid = enqueue(conn, to=f"login{i}@example.com", subject="Your code",
                          text=f"Code: {rng.randint(100000, 999999)}", key=f"{tag}-{i}",
                          queue="critical", settings=SETTINGS).id
        commits.append((rid, time.time()))
    return commits


def latencies(engine: Engine,
              commits: list[tuple[int, float]]) -> tuple[list[float], list[float]]:
    """Commit to ``sent_at`` of each message, and commit to its claim
    (``first_attempt_at``: to tell pickup from sending), in ms."""
    deadline = time.time() + 60
    ids = [rid for rid, _ in commits]
    rows: dict[int, tuple[datetime | None, datetime | None]] = {}
    while time.time() < deadline:
        with engine.connect() as conn:
            rows = {r.id: (r.first_attempt_at, r.sent_at) for r in conn.execute(
                select(messages.c.id, messages.c.first_attempt_at, messages.c.sent_at)
                .where(messages.c.id.in_(ids)))}
        if all(rows.get(i, (None, None))[1] is not None for i in ids):
            break
        time.sleep(0.1)
    sent_ms, claim_ms = [], []
    for rid, committed in commits:
        claimed, sent = rows[rid]
        if claimed is None or sent is None:
            raise RuntimeError(f"message {rid} was not sent within a minute")
        sent_ms.append((sent.astimezone(UTC).timestamp() - committed) * 1000)
        claim_ms.append((claimed.astimezone(UTC).timestamp() - committed) * 1000)
    return sent_ms, claim_ms


def summary(name: str, ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=100, method="inclusive")  # never past the largest
    return (f"{name:<28}{len(ms):>6}{q[49]:>9.1f}{q[94]:>9.1f}{q[98]:>9.1f}"
            f"{max(ms):>9.1f}")


def busy_run(engine: Engine, n: int, critical: int, tag: str,
             rng: random.Random) -> tuple[list[float], list[float], float, int]:
    """One run of phase 2: (critical latencies and commit-to-claim times in ms, bulk
    msg/s meanwhile, bulk rows still pending when the last critical was committed)."""
    before = count(engine, "bulk")  # before the fill: the pause takes up to 2 s to apply
    fill_bulk(engine, n, tag)
    release_bulk(engine)
    time.sleep(2.5)  # let the drain reach full speed
    start_count = count(engine, "bulk")
    t0 = time.perf_counter()
    commits = send_critical(engine, critical, f"{tag}-critical", rng)
    during = (count(engine, "bulk") - start_count) / (time.perf_counter() - t0)
    backlog_left = before + n - count(engine, "bulk")
    busy, claims = latencies(engine, commits)
    wait_drained(engine, "bulk", before + n)
    return busy, claims, during, backlog_left


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=50_000, help="bulk backlog size")
    ap.add_argument("--critical", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3, help="busy runs, one after the other")
    ap.add_argument("--lanes", default=LANES, help=f"MAILOUT_LANES (default {LANES})")
    args = ap.parse_args()
    rng = random.Random(7)
    load = [os.getloadavg()[0]]
    with scratch_database() as url, smtp_sink() as port, stand_in_autovacuum(url) as vacuuming:
        engine = db.make_engine(url)
        migrate.upgrade(engine)
        worker = start_worker(url, port, args.lanes)
        try:
            fill_bulk(engine, args.n, "alone")
            release_bulk(engine)
            alone = args.n / wait_drained(engine, "bulk", args.n)
            runs = []
            for run in range(args.runs):
                runs.append(busy_run(engine, args.n, args.critical, f"busy{run}", rng))
                print(summary(f"run {run + 1}, while bulk drains", runs[-1][0]), flush=True)
                load.append(os.getloadavg()[0])
            idle, _ = latencies(engine, send_critical(engine, args.critical, "idle", rng))
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(60)
            engine.dispose()
    print(f"lanes {args.lanes}; bulk backlog {args.n} per run; critical messages "
          f"{args.critical} per run; load average (1 min) {', '.join(f'{x:.1f}' for x in load)}")
    if vacuuming:
        print("the server runs without autovacuum: the outbox table was vacuumed and "
              "analyzed every 5 s instead (bench/common.py)")
    print(f"{'critical latency (ms)':<28}{'n':>6}{'p50':>9}{'p95':>9}{'p99':>9}{'max':>9}"
          f"{'bulk/s':>9}{'p99<=100':>10}")
    for i, (busy, _, during, left) in enumerate(runs, 1):
        p99 = statistics.quantiles(busy, n=100, method="inclusive")[98]
        verdict = "yes" if p99 <= TARGET_P99_MS else "NO"
        note = "" if left > 0 else "  (backlog ran out: use a larger -n)"
        print(f"{summary(f'run {i}, while bulk drains', busy)}{during:>9.0f}{verdict:>10}{note}")
    print(summary("worker idle", idle))
    for i, (_, claims, _, _) in enumerate(runs, 1):
        print(summary(f"run {i}, commit to claim", claims))
    print(f"bulk alone:            {alone:8.0f} msg/s")
    passed = sum(statistics.quantiles(b, n=100, method="inclusive")[98] <= TARGET_P99_MS
                 for b, _, _, _ in runs)
    print(f"p99 <= {TARGET_P99_MS:.0f} ms in {passed} of {len(runs)} consecutive runs")


if __name__ == "__main__":
    main()
