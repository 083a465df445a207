"""Drain throughput through an HTTP provider API next to SMTP, on loopback.

The same N pending messages (the benchmark template: subject, ~2 KB text, ~2 KB HTML)
are drained by one ``mailout worker --until-idle`` process twice on PostgreSQL:

- ``smtp``: into Postfix's ``smtp-sink`` (bench/common.py), as bench/throughput.py does;
- ``resend``: through ``resend://`` into the Resend fake of the test suite
  (bench/support/providers/resend.py), a Python ``http.server`` in a thread of this
  process that checks each request, keeps every idempotency key and records each
  delivery. Every send carries its ``Idempotency-Key``.

"steady" is sent rows over the database-clock span from the first claim to the last
``sent_at``; "wall" counts process start to exit; "cpu/msg" is the worker's own CPU
(wait4) per message. The fake costs CPU of its own on the same two cores, so the HTTP
figure is a floor for mailout's side, not a provider's speed.

    .venv/bin/python -m bench.providers [-n 5000] [--concurrency 20]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from sqlalchemy import Engine, func, select, text

from bench.common import (
    TEMPLATE,
    params,
    run_workers,
    scratch_database,
    smtp_sink,
    worker_env,
    write_templates,
)
from bench.support.providers.resend import FakeResend
from mailout import db
from mailout.db import migrate
from mailout.db.schema import messages
from mailout.outbox import EnqueueSettings, Message, enqueue_many


def fill(engine: Engine, n: int, templates: Path, tag: str) -> None:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE mailout_attempts, mailout_messages RESTART IDENTITY "
                          "CASCADE"))
    settings = EnqueueSettings(templates_dir=templates, message_id_domain="shop.example.com")
    for start in range(0, n, 10_000):
        with engine.begin() as conn:
            enqueue_many(conn, [Message(to=f"customer{i}@example.com", template=TEMPLATE,
                                        params=params(i), key=f"{tag}-{i}")
                                for i in range(start, min(n, start + 10_000))],
                         settings=settings)


def drain(engine: Engine, env: dict[str, str], n: int) -> tuple[int, float, float, float]:
    run = run_workers(env, 1)
    with engine.connect() as conn:
        sent, first, last = conn.execute(
            select(func.count(), func.min(messages.c.first_attempt_at),
                   func.max(messages.c.sent_at)).where(messages.c.status == "sent")).one()
    span = (last - first).total_seconds() if sent else 0.0
    return sent, run.wall, sent / span if span > 0 else 0.0, run.cpu[0] / max(sent, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=5_000, help="messages per drain (default 5000)")
    ap.add_argument("--concurrency", type=int, default=20,
                    help="MAILOUT_CONCURRENCY of the worker (default 20)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp, scratch_database() as url, \
            smtp_sink() as port, FakeResend() as fake:
        templates = write_templates(Path(tmp))
        engine = db.make_engine(url)
        migrate.upgrade(engine)
        base = worker_env(url, port, templates, args.concurrency)
        for name, env in (
            ("smtp -> smtp-sink", base),
            ("resend:// -> Resend fake", {**base, "MAILOUT_TRANSPORT":
                                          f"resend://{fake.secret}?endpoint={fake.url}"}),
        ):
            print(f"draining {args.n} through {name}...", flush=True)
            fill(engine, args.n, templates, name.split()[0])
            rows.append((name, *drain(engine, env, args.n)))
        delivered = len(fake.delivered)
        engine.dispose()
    print(f"\n{args.n} messages, 1 worker process, MAILOUT_CONCURRENCY={args.concurrency}")
    print(f"{'transport':<28}{'sent':>7}{'wall s':>9}{'steady msg/s':>14}{'cpu ms/msg':>12}")
    for name, sent, wall, steady, cpu in rows:
        print(f"{name:<28}{sent:>7}{wall:>9.1f}{steady:>14.0f}{cpu * 1000:>12.2f}")
    print(f"Resend fake: {delivered} deliveries recorded, {len(fake.violations)} bad requests")


if __name__ == "__main__":
    main()
