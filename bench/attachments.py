"""Attachments: drain rate with and without them, and a worker's memory with large ones.

PostgreSQL (see bench/common.py) and Postfix's ``smtp-sink`` on loopback; every run
is ``mailout worker --until-idle`` as a real process, and its peak RSS comes from
``wait4``. Prints one table:

1. Drain, side by side: N plain messages (the throughput benchmark's template,
   ~2 KB text and ~2 KB HTML), then the same N messages each with a 100 KB PDF of
   its own (distinct contents: no cache helps), then the same N with one shared
   100 KB PDF. Plain and 100 KB runs alternate ``--rounds`` times; the median is
   shown, with every round.
   Next to each, the raw limit: the same messages pre-built as bytes and sent by a
   plain ``smtplib`` loop over one connection, no database (smtp-sink reads large
   messages line by line, so it, not the sender, sets the pace for attachments).
2. Memory: M messages (default 100) each with a 5 MB attachment of its own, drained
   by one worker at the default concurrency (10) and at ``--concurrency``: peak RSS,
   next to the plain drain's.

    .venv/bin/python -m bench.attachments [-n 2000] [-m 100] [--rounds 3] [--only-large]
"""

from __future__ import annotations

import argparse
import os
import smtplib
import statistics
import tempfile
import time
from dataclasses import dataclass
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
from mailout import Attachment, db
from mailout.db import migrate
from mailout.db.schema import messages
from mailout.message import mime
from mailout.outbox import EnqueueSettings, Message, enqueue_many

KB = 1024
MB = 1024 * KB


@dataclass
class Run:
    label: str
    sent: int
    rate: float  # msg/s over the database-clock span of the sends
    wall: float
    peak_mb: float


def reset(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE mailout_messages, mailout_attachments "
                          "RESTART IDENTITY CASCADE"))


def fill(engine: Engine, templates: Path, n: int, size: int, shared: bool, tag: str) -> None:
    cfg = EnqueueSettings(templates_dir=templates, message_id_domain="shop.example.com",
                          max_attachment_bytes=max(size, 1), max_message_bytes=2 * size + MB)
    common = os.urandom(size)
    step = max(1, min(1000, 20 * MB // max(size, 1)))  # keep each transaction's bytes bounded
    for start in range(0, n, step):
        batch = []
        for i in range(start, min(n, start + step)):
            files = []
            if size:
                files = [Attachment(f"invoice-{i}.pdf", common if shared else os.urandom(size))]
            batch.append(Message(to=f"customer{i}@example.com", template=TEMPLATE,
                                 params=params(i), key=f"{tag}-{i}", attachments=files))
        with engine.begin() as conn:
            enqueue_many(conn, batch, settings=cfg)


def drain(engine: Engine, url: str, port: int, templates: Path, label: str, n: int,
          size: int, shared: bool, concurrency: int) -> Run:
    reset(engine)
    fill(engine, templates, n, size, shared, label)
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(text("VACUUM ANALYZE mailout_messages"))
    run = run_workers(worker_env(url, port, templates, concurrency), 1)
    with engine.connect() as conn:
        sent, first, last = conn.execute(
            select(func.count(), func.min(messages.c.first_attempt_at),
                   func.max(messages.c.sent_at)).where(messages.c.status == "sent")).one()
    if sent != n:
        raise RuntimeError(f"{label}: {sent} of {n} sent")
    span = (last - first).total_seconds() if sent else 0.0
    return Run(label, sent, sent / span if span > 0 else 0.0, run.wall,
               run.peak_kb[0] / 1024)


def raw_limit(port: int, size: int, n: int = 300) -> float:
    """msg/s of a plain smtplib loop sending pre-built messages of this kind."""
    head = [mime.raw("Message-ID", "<bench@shop.example.com>"),
            mime.address("From", [("Shop", "shop@example.com")]),
            mime.address("To", [("", "customer@example.com")]),
            mime.unstructured("Subject", "Your order is confirmed"), "MIME-Version: 1.0\r\n"]
    files = [Attachment("invoice.pdf", os.urandom(size))] if size else []
    wires = [mime.build(head, "Line of text. " * 140, "<p>Some <b>HTML</b></p>" * 60, files)
             for _ in range(n)]
    best = 0.0
    for _ in range(3):
        smtp = smtplib.SMTP("127.0.0.1", port)
        t0 = time.perf_counter()
        for wire in wires:
            smtp.sendmail("shop@example.com", ["customer@example.com"], wire)
        best = max(best, n / (time.perf_counter() - t0))
        smtp.quit()
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=2_000, help="messages per drain (default 2000)")
    ap.add_argument("-m", type=int, default=100, help="messages with 5 MB each (default 100)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating drains (default 3)")
    ap.add_argument("--concurrency", type=int, default=50,
                    help="worker concurrency for the drains (default 50)")
    ap.add_argument("--only-large", action="store_true", help="only the 5 MB memory runs")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, scratch_database() as url, smtp_sink() as port:
        templates = write_templates(Path(tmp) / "templates")
        engine = db.make_engine(url)
        migrate.upgrade(engine)
        rounds: dict[str, list[Run]] = {"plain": [], "100 KB each": [], "100 KB shared": []}
        raw = {"plain": raw_limit(port, 0), "100 KB each": raw_limit(port, 100 * KB)}
        raw["100 KB shared"] = raw["100 KB each"]
        for r in range(0 if args.only_large else args.rounds):
            for label, size, shared in (("plain", 0, False), ("100 KB each", 100 * KB, False),
                                        ("100 KB shared", 100 * KB, True)):
                print(f"round {r + 1}: {label}...", flush=True)
                rounds[label].append(drain(engine, url, port, templates, label, args.n,
                                           size, shared, args.concurrency))
        big = [drain(engine, url, port, templates, f"5 MB each, concurrency {c}", args.m,
                     5 * MB, False, c) for c in (10, args.concurrency)]
        engine.dispose()
    if not args.only_large:
        print(f"\nN={args.n} per drain, 1 worker process, concurrency {args.concurrency}, "
              "PostgreSQL, smtp-sink on loopback")
        print(f"{'':20}{'msg/s':>7}{'vs plain':>10}{'raw smtplib':>13}{'vs raw':>8}"
              f"{'peak RSS MB':>13}   every round (msg/s)")
        plain = statistics.median(r.rate for r in rounds["plain"])
        for label, runs in rounds.items():
            rate = statistics.median(r.rate for r in runs)
            peak = max(r.peak_mb for r in runs)
            every = ", ".join(f"{r.rate:.0f}" for r in runs)
            print(f"{label:20}{rate:7.0f}{rate / plain:9.0%} {raw[label]:12.0f}"
                  f"{rate / raw[label]:8.0%} {peak:12.0f}   {every}")
    print(f"\nM={args.m} messages with a 5 MB attachment each (distinct contents)")
    for run in big:
        print(f"{run.label:28}{run.rate:8.1f} msg/s   peak RSS {run.peak_mb:.0f} MB   "
              f"wall {run.wall:.1f} s")


if __name__ == "__main__":
    main()
