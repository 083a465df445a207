"""Drain rate: how fast a worker empties a queue of pending messages.

PostgreSQL (see bench/common.py) and Postfix's ``smtp-sink`` on loopback. N messages
are enqueued from a template with a subject, a text part and an HTML part, then one
worker process drains them until idle. Every state change is committed.

    .venv/bin/python -m bench.throughput [-n 5000] [--concurrency 20]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import func, select

from bench.common import scratch_database, smtp_sink
from mailout import db
from mailout.enqueue import EnqueueSettings, Message, enqueue_many
from mailout.schema import messages

TEXT = "Hello {{ name }},\n\nThank you for order {{ order_id }}.\n" + "Line of text. " * 140
HTML = "<p>Hello {{ name }},</p><p>Thank you for order {{ order_id }}.</p>" + (
    "<p>Some <b>HTML</b> content.</p>" * 60
)


def write_templates(root: Path) -> None:
    folder = root / "order_confirmation"
    folder.mkdir(parents=True)
    (folder / "subject.txt").write_text("Your order {{ order_id }} is confirmed")
    (folder / "text.txt").write_text(TEXT)
    (folder / "html.html").write_text(HTML)


def fill(url: str, n: int) -> None:
    engine = db.make_engine(url)
    db.upgrade(engine)
    settings = EnqueueSettings(message_id_domain="shop.example.com")
    batch = [Message(to=f"customer{i}@example.com", template="order_confirmation",
                     params={"name": f"Customer {i}", "order_id": i}, key=f"order-{i}")
             for i in range(n)]
    with engine.begin() as conn:
        enqueue_many(conn, batch, settings=settings)
    engine.dispose()


def drain(url: str, port: int, templates: Path, concurrency: int) -> tuple[float, int]:
    env = {**os.environ, "MAILOUT_DATABASE_URL": url, "MAIL_FROM": "shop@example.com",
           "SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(port), "SMTP_TLS": "none",
           "MAILOUT_TEMPLATES": str(templates), "MAILOUT_CONCURRENCY": str(concurrency)}
    exe = Path(sys.executable).parent / "mailout"
    t0 = time.perf_counter()
    subprocess.run([str(exe), "worker", "--until-idle"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return elapsed, peak_kb


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=5000)
    ap.add_argument("--concurrency", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, scratch_database() as url, smtp_sink() as port:
        write_templates(Path(tmp))
        fill(url, args.n)
        elapsed, peak_kb = drain(url, port, Path(tmp), args.concurrency)
        engine = db.make_engine(url)
        with engine.connect() as conn:
            sent = conn.execute(select(func.count()).where(messages.c.status == "sent"))
            n_sent = sent.scalar_one()
        engine.dispose()
    print(f"{'messages':>9} {'sent':>6} {'seconds':>8} {'msg/s':>8} {'peak RSS MB':>12}")
    print(f"{args.n:>9} {n_sent:>6} {elapsed:>8.2f} {n_sent / elapsed:>8.0f} "
          f"{peak_kb / 1024:>12.1f}")


if __name__ == "__main__":
    main()
