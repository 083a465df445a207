"""A provider outage, end to end: nothing dies, nothing is charged, all of it goes out.

A real ``mailout worker`` process sends to a loopback port where nothing listens
for ``--outage`` seconds; then Postfix's ``smtp-sink`` comes up on that port. The
retry limits are scaled down (3 attempts, 0.5 s base, 2 s cap) so that, were
outage attempts charged, every message would be dead within seconds; the outage
probe settings are the product's defaults (5 s, doubling up to 300 s) unless given.

Reported: outage length, messages, final statuses, the most charged attempts of any
message (the ``attempts`` column and the attempt log's ``charged`` rows), the
uncharged outage attempts logged, and the time from the listener coming up to the
last message sent (it includes the wait for the next probe, which is the backoff at
that point of the outage).

    .venv/bin/python -m bench.outage [-n 500] [--outage 60] [--postgres]
        [--probe 5] [--probe-cap 300]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import Engine, func, select

from bench.common import MAIL_FROM, free_port, scratch_database
from mailout import db
from mailout.db import migrate
from mailout.db.schema import attempts, messages
from mailout.outbox import EnqueueSettings, Message, enqueue_many


@contextlib.contextmanager
def smtp_sink_on(port: int) -> Iterator[None]:
    """Postfix's smtp-sink on ``port`` (the one the worker already sends to)."""
    exe = shutil.which("smtp-sink") or "/usr/sbin/smtp-sink"
    proc = subprocess.Popen([exe, "-u", "postfix", f"127.0.0.1:{port}", "1000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.02)
        yield
    finally:
        proc.terminate()
        proc.wait(5)


def add(engine: Engine, n: int) -> None:
    settings = EnqueueSettings(message_id_domain="shop.example.com")
    with engine.begin() as conn:
        enqueue_many(conn, [Message(to=f"user{i}@example.com", subject=f"Order {i}",
                                    text="Thank you for your order.", key=f"order-{i}")
                            for i in range(n)], settings=settings)


def counts(engine: Engine) -> Counter[str]:
    with engine.connect() as conn:
        return Counter(dict(conn.execute(
            select(messages.c.status, func.count()).group_by(messages.c.status)).all()))


def charged(engine: Engine) -> tuple[int, int, int]:
    """(max attempts column, max charged attempt rows of a message, uncharged outage rows)."""
    with engine.connect() as conn:
        column = conn.execute(select(func.max(messages.c.attempts))).scalar_one() or 0
        per_message = select(func.count().label("n")).where(attempts.c.charged).group_by(
            attempts.c.outbox_id).subquery()
        rows = conn.execute(select(func.max(per_message.c.n))).scalar_one() or 0
        outage = conn.execute(select(func.count()).select_from(attempts).where(
            attempts.c.outcome == "outage", attempts.c.charged.is_(False))).scalar_one()
    return int(column), int(rows), int(outage)


def run(url: str, n: int, outage: float, probe: float | None, probe_cap: float | None,
        log: Path) -> dict[str, str]:
    engine = db.make_engine(url)
    migrate.upgrade(engine)
    add(engine, n)
    port = free_port()
    env = {**os.environ, "MAILOUT_DATABASE_URL": url, "MAIL_FROM": MAIL_FROM,
           "SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(port), "SMTP_TLS": "none",
           "SMTP_TIMEOUT": "5", "MAILOUT_MAX_ATTEMPTS": "3", "MAILOUT_RETRY_BASE_SECONDS": "0.5",
           "MAILOUT_RETRY_CAP_SECONDS": "2", "MAILOUT_CONCURRENCY": "10",
           "MAILOUT_POLL_SECONDS": "0.2"}
    if probe is not None:
        env["MAILOUT_OUTAGE_PROBE_SECONDS"] = str(probe)
    if probe_cap is not None:
        env["MAILOUT_OUTAGE_PROBE_CAP_SECONDS"] = str(probe_cap)
    exe = Path(sys.executable).parent / "mailout"
    with open(log, "wb") as out:
        worker = subprocess.Popen([str(exe), "-v", "worker"], env=env, stdout=out,
                                  stderr=subprocess.STDOUT)
    try:
        # The outage starts with the worker's first attempt (the process takes a moment).
        while charged(engine)[2] == 0:
            time.sleep(0.05)
        time.sleep(outage)
        during = counts(engine)
        with smtp_sink_on(port):
            recovered = time.monotonic()
            while counts(engine)["sent"] + counts(engine)["dead"] < n:
                time.sleep(0.05)
            drained = time.monotonic() - recovered
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    final = counts(engine)
    column, rows, outage_rows = charged(engine)
    engine.dispose()
    return {
        "database": engine.dialect.name,
        "outage length (s)": f"{outage:.0f}",
        "messages": str(n),
        "statuses during the outage": ", ".join(f"{k} {v}" for k, v in sorted(during.items())),
        "final statuses": ", ".join(f"{k} {v}" for k, v in sorted(final.items())),
        "charged attempts per message (max)": f"{column} (attempt log: {rows})",
        "uncharged outage attempts logged": str(outage_rows),
        "recovery to last message sent (s)": f"{drained:.1f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=500)
    parser.add_argument("--outage", type=float, default=60.0, help="seconds")
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL, else SQLite")
    parser.add_argument("--probe", type=float, help="MAILOUT_OUTAGE_PROBE_SECONDS")
    parser.add_argument("--probe-cap", type=float, help="MAILOUT_OUTAGE_PROBE_CAP_SECONDS")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "worker.log"
        if args.postgres:
            with scratch_database() as url:
                report = run(url, args.n, args.outage, args.probe, args.probe_cap, log)
        else:
            report = run(f"sqlite:///{tmp}/outage.db", args.n, args.outage, args.probe,
                         args.probe_cap, log)
        lines = log.read_text(errors="replace").splitlines()
        outage_lines = [line for line in lines if "transport outage" in line]
    width = max(map(len, report))
    print("| what | value |\n|---|---|")
    for key, value in report.items():
        print(f"| {key:<{width}} | {value} |")
    print("\nworker log (outage lines):")
    shown = outage_lines if len(outage_lines) <= 4 else [*outage_lines[:3], "...",
                                                         outage_lines[-1]]
    for line in shown:
        print("  " + line)


if __name__ == "__main__":
    main()
