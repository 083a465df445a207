"""Webhook ingestion throughput: signed events per second into PostgreSQL, one process.

Two measurements on a scratch PostgreSQL database holding ``--rows`` sent messages:

1. **server**: ``mailout webhooks serve`` runs as one process; a client process
   posts pre-signed Resend (Svix) ``email.bounced`` webhooks over HTTP keep-alive
   from ``--clients`` threads. Each event is verified, stored, linked to its row by
   provider id and suppresses its address: the whole path a real bounce takes.
2. **handler**: the same requests handed to the handler in this process, one thread:
   verification + parsing + one transaction per event, without HTTP.

Every request is checked to have answered 200 with one stored, matched event, and
the events table is counted at the end. The client signs everything before the
clock starts, so signing cost is not counted.

    .venv/bin/python -m bench.webhooks [--events 3000] [--clients 8]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import func, insert, select

from bench.common import free_port, scratch_database
from bench.support import webhooks as w
from mailout import db
from mailout.db import migrate
from mailout.db.schema import events, messages

MAILOUT = str(Path(sys.executable).parent / "mailout")


def seed(url: str, rows: int) -> None:
    engine = db.make_engine(url)
    migrate.upgrade(engine)
    now = datetime.now(UTC)
    with engine.begin() as conn:
        conn.execute(insert(messages), [{
            "idempotency_key": f"k{i}", "recipient": f"r{i}@example.com",
            "message_id": f"<m{i}@shop.example>", "status": "sent",
            "provider_message_id": f"re_{i}", "subject": "s", "body_text": "t",
            "next_attempt_at": now, "created_at": now, "sent_at": now,
        } for i in range(rows)])
    engine.dispose()


def requests(n: int, offset: int) -> list[tuple[bytes, dict[str, str]]]:
    out = []
    for i in range(offset, offset + n):
        doc = w.resend_event("email.bounced", f"r{i}@example.com", f"re_{i}", bounce={
            "type": "Permanent", "subType": "General", "message": "550 5.1.1 unknown"})
        body, headers = w.resend_request(doc)
        out.append((body, {**headers, "Content-Type": "application/json"}))
    return out


def count_events(url: str) -> int:
    engine = db.make_engine(url)
    with engine.connect() as conn:
        n = int(conn.execute(select(func.count()).select_from(events)).scalar_one())
    engine.dispose()
    return n


def bench_server(url: str, batch: list[tuple[bytes, dict[str, str]]], clients: int) -> float:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILOUT_")}
    env.update({"MAILOUT_DATABASE_URL": url, "MAILOUT_WEBHOOK_RESEND_SECRET": w.RESEND_SECRET,
                "MAILOUT_BOUNCE_RATE_ALERT": "off", "MAILOUT_COMPLAINT_RATE_ALERT": "off"})
    proc = subprocess.Popen([MAILOUT, "webhooks", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        failures: list[str] = []
        shares = [batch[i::clients] for i in range(clients)]

        def client(share: list[tuple[bytes, dict[str, str]]]) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            for body, headers in share:
                conn.request("POST", "/webhooks/resend", body, headers)
                resp = conn.getresponse()
                reply = json.loads(resp.read())
                if resp.status != 200 or reply.get("stored") != 1 or reply.get("matched") != 1:
                    failures.append(f"{resp.status} {reply}")
            conn.close()

        threads = [threading.Thread(target=client, args=(s,)) for s in shares]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        if failures:
            raise SystemExit(f"{len(failures)} requests failed, e.g. {failures[0]}")
        return len(batch) / elapsed
    finally:
        proc.terminate()
        proc.wait(15)


def bench_handler(url: str, batch: list[tuple[bytes, dict[str, str]]]) -> tuple[float, float]:
    """(events per second, this process's CPU microseconds per event)."""
    from mailout.webhooks.handler import WebhookHandler
    from mailout.webhooks.settings import WebhookSettings, svix_secret

    engine = db.make_engine(url)
    handler = WebhookHandler(engine, WebhookSettings(
        resend_secret=svix_secret("bench", w.RESEND_SECRET), bounce_rate_alert=None,
        complaint_rate_alert=None))
    started, cpu = time.perf_counter(), time.process_time()
    for body, headers in batch:
        reply = handler.handle("resend", headers, body)
        if reply.status != 200 or reply.body["stored"] != 1:
            raise SystemExit(f"handler answered {reply}")
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    engine.dispose()
    return len(batch) / elapsed, cpu / len(batch) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rows", type=int, default=20000, help="sent messages in the table")
    args = parser.parse_args()
    with scratch_database() as url:
        seed(url, max(args.rows, 2 * args.events))
        server_batch = requests(args.events, 0)
        handler_batch = requests(args.events, args.events)
        server_rate = bench_server(url, server_batch, args.clients)
        handler_rate, cpu_us = bench_handler(url, handler_batch)
        stored = count_events(url)
    assert stored == 2 * args.events, stored
    print(f"signed Resend bounces, {args.events} per run, PostgreSQL, each stored, linked "
          "and suppressing its address")
    print(f"  mailout webhooks serve (1 process, HTTP, {args.clients} client threads): "
          f"{server_rate:,.0f} events/s")
    print(f"  handler alone (1 thread, no HTTP):                           "
          f"{handler_rate:,.0f} events/s, {cpu_us:,.0f} us of CPU per event in this process")
    print(f"  load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
