"""Claim cost by store and lane: does a claim stop after LIMIT rows behind a backlog?

For each store, a fresh database gets a backlog: ``-n`` pending rows of priority 5 in
queue ``other`` (first in claim order), and ``-n`` more split evenly between ``bulk``
and ``news``. Then, with the statistics the table has when filled and again after
``ANALYZE``, the median of ``--claims`` claims of 50 rows (``leasing.claim``, each
rolled back so that every claim sees the same backlog) for three lanes: every queue,
``bulk`` alone, and ``bulk`` + ``news``. A claim that reads its queues' claim index in
order costs the same whatever the backlog; one that sorts or walks the backlog grows
with it.

Each measurement runs in a child process, so ``--before SRC`` (the ``src/`` of a
worktree of an earlier commit) measures an older claim in the same run, interleaved
with this tree's, on a backlog of its own: the table prints both and their ratio.

SQLite is a file in a temporary directory; PostgreSQL and MariaDB/MySQL are scratch
databases on the servers of ``bench/common.py`` (a store whose server cannot be
reached is left out, with the reason).

    python -m bench.claims [-n 60000] [--claims 20] [--stores sqlite,postgresql,mysql]
                           [--before /path/to/older/src]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, insert, text

from bench.common import scratch_database, scratch_mysql_database
from mailout import db
from mailout.db import leasing, migrate
from mailout.db.schema import messages

LANES: dict[str, tuple[str, ...]] = {"every queue": (), "bulk": ("bulk",),
                                     "bulk+news": ("bulk", "news")}
LIMIT = 50
STORES = ("sqlite", "postgresql", "mysql")


@contextmanager
def _sqlite_database() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite:///{Path(tmp) / 'claims.db'}"


def _database(store: str) -> AbstractContextManager[str]:
    if store == "postgresql":
        return scratch_database()
    if store == "mysql":
        return scratch_mysql_database()
    return _sqlite_database()


def fill(engine: Engine, n: int) -> None:
    """The backlog: ``n`` rows of priority 5 in ``other``, ``n`` more in bulk and news."""
    due = datetime.now(UTC) - timedelta(hours=1)
    plan = [("other", 5, n), ("bulk", 0, n // 2), ("news", 0, n - n // 2)]
    rows = [{"idempotency_key": f"{queue}-{i}", "message_id": f"<{queue}.{i}@bench.example>",
             "queue": queue, "priority": priority, "status": "pending",
             "recipient": f"u{i}@example.com", "sender": "shop@example.com",
             "subject": "Hi", "body_text": "x", "next_attempt_at": due, "created_at": due}
            for queue, priority, count in plan for i in range(count)]
    with engine.begin() as conn:
        for start in range(0, len(rows), 5000):
            conn.execute(insert(messages), rows[start:start + 5000])


def analyze(engine: Engine) -> None:
    name = engine.dialect.name
    statement = {"postgresql": "VACUUM (ANALYZE) mailout_messages",
                 "mysql": "ANALYZE TABLE mailout_messages"}.get(name, "ANALYZE")
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(text(statement))


def median_claim_ms(engine: Engine, queues: tuple[str, ...], claims: int) -> float:
    """Median wall time of ``claims`` claims of LIMIT rows (after two unmeasured ones)."""
    times = []
    for i in range(claims + 2):
        with engine.connect() as conn:
            started = time.perf_counter()
            got = leasing.claim(conn, owner="bench", limit=LIMIT, lease_seconds=60,
                                queues=queues or None)
            elapsed = time.perf_counter() - started
            conn.rollback()
        if len(got) != LIMIT or (queues and {m.queue for m in got} - set(queues)):
            raise RuntimeError(f"the claim over {queues or 'every queue'} took the wrong rows")
        if i >= 2:
            times.append(elapsed * 1000)
    return statistics.median(times)


def measure(store: str, n: int, claims: int) -> dict[str, dict[str, float]]:
    """{statistics state: {lane: median ms}} on a fresh ``store`` database."""
    with _database(store) as url:
        engine = db.make_engine(url)
        try:
            migrate.upgrade(engine)
            fill(engine, n)
            out: dict[str, dict[str, float]] = {}
            for state in ("as filled", "analyzed"):
                if state == "analyzed":
                    analyze(engine)
                out[state] = {lane: median_claim_ms(engine, queues, claims)
                              for lane, queues in LANES.items()}
            return out
        finally:
            engine.dispose()


def in_child(store: str, n: int, claims: int, src: str | None) -> dict[str, Any]:
    """:func:`measure` in a child process, importing mailout from ``src`` if given."""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "bench.claims", "--child", store, "-n", str(n),
         "--claims", str(claims)],
        cwd=root, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=60_000,
                    help="rows ahead in another queue, and rows in the lanes' queues")
    ap.add_argument("--claims", type=int, default=20, help="measured claims per lane")
    ap.add_argument("--stores", default=",".join(STORES), help="of " + ", ".join(STORES))
    ap.add_argument("--before", metavar="SRC", help="also measure this older src/ tree")
    ap.add_argument("--child", choices=STORES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.n, args.claims)))
        return
    print(f"claims of {LIMIT} rows, median of {args.claims}; {args.n:,} rows of priority 5 "
          f"in another queue ahead of {args.n:,} in bulk and news")
    header = f"{'store':<11} {'statistics':<10} {'lane':<12}"
    print(header + (f" {'before':>9} {'now':>9} {'now/before':>10}" if args.before
                    else f" {'now':>9}"))
    for store in args.stores.split(","):
        before = in_child(store, args.n, args.claims, args.before) if args.before else None
        now = in_child(store, args.n, args.claims, None)
        failed = [r for r in (before, now) if r and "error" in r]
        if failed:
            print(f"{store:<11} left out: {failed[0]['error']}")
            continue
        for state, lanes in now.items():
            for lane, ms in lanes.items():
                row = f"{store:<11} {state:<10} {lane:<12}"
                if before:
                    was = before[state][lane]
                    row += f" {was:>6.1f} ms {ms:>6.1f} ms {ms / was:>9.2f}x"
                else:
                    row += f" {ms:>6.1f} ms"
                print(row, flush=True)


if __name__ == "__main__":
    main()
