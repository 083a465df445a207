"""Client CPU of the worker's two hot statements on PostgreSQL, through SQLAlchemy's
``Connection.execute`` and on psycopg's cursor (mailout.db.hot_statements), side by side.

Each round fills N template messages, then claims them in batches of ``--batch`` (the
lanes' usual size under a backlog) and completes them in batches of 50 (the
completion writer's target), once on an engine with a statement listener (which keeps
every statement on ``Connection.execute``) and once on a plain engine (the cursor
path), in alternating order. CPU is ``time.process_time()`` of this process around
each transaction: what the worker's database threads spend, PostgreSQL's own work
excluded.

    .venv/bin/python -m bench.worker_sql [-n 10000] [--batch 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, event

from bench.common import scratch_database, write_templates
from bench.throughput import analyze, fill, reset
from mailout import db
from mailout.db import leasing, migrate, outcomes
from mailout.models import ClaimedMessage, Completion, Outcome, Status

COMPLETE_BATCH = 50


@dataclass
class Cost:
    claim: float  # CPU seconds per claimed message
    complete: float  # CPU seconds per completed message
    statements: int  # claims run


def _sent(m: ClaimedMessage, now: datetime) -> Completion:
    return Completion(id=m.id, lease_token=m.lease_token, attempt=m.attempts,
                      outcome=Outcome.SENT, status=Status.SENT, started_at=now,
                      worker="bench", recipient=m.recipient, reason="accepted", stage="body",
                      reply_code=250, enhanced_code="2.0.0",
                      reply_text="2.0.0 Ok: queued as 4Xb1", provider_message_id="4Xb1",
                      transport="smtp")


def drain(engine: Engine, batch: int) -> Cost:
    claim_cpu = complete_cpu = 0.0
    claimed = statements = 0
    done: list[Completion] = []
    with engine.connect() as conn:
        while True:
            t0 = time.process_time()
            with conn.begin():
                got = leasing.claim(conn, owner="bench", limit=batch, lease_seconds=60,
                                    transport="smtp")
            claim_cpu += time.process_time() - t0
            statements += 1
            claimed += len(got)
            now = datetime.now(UTC)
            done += [_sent(m, now) for m in got]
            if len(done) >= COMPLETE_BATCH or (not got and done):
                t0 = time.process_time()
                with conn.begin():
                    outcomes.complete(conn, done)
                complete_cpu += time.process_time() - t0
                done = []
            if not got:
                break
    return Cost(claim_cpu / claimed, complete_cpu / claimed, statements)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=10000, help="messages per drain (default 10000)")
    ap.add_argument("--batch", type=int, default=20, help="rows per claim (default 20)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved pairs (default 3)")
    args = ap.parse_args()
    costs: dict[str, list[Cost]] = {"Connection.execute": [], "cursor (direct)": []}
    with tempfile.TemporaryDirectory() as tmp, scratch_database() as url:
        templates = write_templates(Path(tmp))
        plain = db.make_engine(url)
        migrate.upgrade(plain)
        watched = db.make_engine(url)
        event.listen(watched, "before_cursor_execute", lambda *_: None)
        engines = {"Connection.execute": watched, "cursor (direct)": plain}
        for r in range(args.rounds):
            order = list(engines) if r % 2 == 0 else list(reversed(engines))
            for name in order:
                reset(plain)
                fill(plain, args.n, templates, f"sql-{r}-{time.time()}")
                analyze(plain)
                costs[name].append(drain(engines[name], args.batch))
                print(f"round {r + 1}: {name}: claim {costs[name][-1].claim * 1e6:.1f} us, "
                      f"complete {costs[name][-1].complete * 1e6:.1f} us per message",
                      flush=True)
        plain.dispose()
        watched.dispose()
    print(f"\nclient CPU per message, N={args.n}, claims of {args.batch}, completions of "
          f"{COMPLETE_BATCH}, medians of {args.rounds} (load average {os.getloadavg()[0]:.1f})")
    print(f"  {'':22}{'claim':>10}{'per claim':>12}{'complete':>10}{'both':>10}")
    medians = {}
    for name, runs in costs.items():
        claim = statistics.median(c.claim for c in runs)
        complete = statistics.median(c.complete for c in runs)
        per_statement = claim * args.n / statistics.median(c.statements for c in runs)
        medians[name] = claim + complete
        print(f"  {name:22}{claim * 1e6:8.1f}us{per_statement * 1e6:10.0f}us"
              f"{complete * 1e6:8.1f}us{(claim + complete) * 1e6:8.1f}us")
    ratio = medians["cursor (direct)"] / medians["Connection.execute"]
    print(f"  cursor path / Connection.execute: {ratio:.2f}x")


if __name__ == "__main__":
    main()
