"""Web console response times over a million messages, on PostgreSQL.

Fills a scratch database with ``--rows`` messages (default 1,000,000) spread over 30
days (mostly sent; some failed, dead, pending, cancelled, unknown; four queues, four
templates) and one attempt per message, with ``INSERT ... SELECT generate_series``,
then serves the real console with uvicorn on a loopback port and times each page
through HTTP (keep-alive, one request at a time, after a warm-up). Prints p50 and
p95 per page.

    .venv/bin/python -m bench.web [--rows 1000000] [--requests 60]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn
from sqlalchemy import Engine, text

from bench.common import scratch_database
from mailout import db
from mailout.db import migrate
from mailout.web import WebSettings, create_app

TOKEN = "bench-token-0123456789abcdef"  # a local benchmark credential

# Status by i % 1000: 2 % pending, 3 % failed, 2 % dead, 0.5 % cancelled, 0.3 %
# unknown, the rest sent. Queue by i % 20, template by i % 4.
FILL_MESSAGES = """
INSERT INTO mailout_messages (idempotency_key, queue, priority, status, reason, recipient,
    template, params, message_id, attempts, next_attempt_at, created_at, last_attempt_at,
    sent_at, finished_at, provider_message_id, last_reply_code, last_reply_text)
SELECT 'order-' || i || '-mail',
       CASE WHEN i % 20 < 14 THEN 'default' WHEN i % 20 < 19 THEN 'bulk' ELSE 'critical' END,
       0, s.status,
       CASE s.status WHEN 'failed' THEN 'recipient_rejected' WHEN 'dead' THEN 'max_attempts'
            WHEN 'cancelled' THEN 'operator' END,
       'user' || (i % 200000) || '@example.com',
       (ARRAY['order_confirmation', 'invoice', 'password_reset', 'newsletter'])[i % 4 + 1],
       jsonb_build_object('order_id', i, 'customer_name', 'Customer ' || i),
       '<' || md5(i::text) || '@shop.example.com>',
       CASE WHEN s.status = 'pending' THEN 0 ELSE 1 END,
       t.created, t.created,
       CASE WHEN s.status = 'pending' THEN NULL ELSE t.created + interval '2 seconds' END,
       CASE WHEN s.status = 'sent' THEN t.created + interval '2 seconds' END,
       CASE WHEN s.status IN ('sent', 'failed', 'dead', 'cancelled')
            THEN t.created + interval '2 seconds' END,
       CASE WHEN s.status = 'sent' THEN 'PROV' || i END,
       CASE s.status WHEN 'sent' THEN 250 WHEN 'failed' THEN 550 WHEN 'dead' THEN 451 END,
       CASE s.status WHEN 'sent' THEN '2.0.0 Ok: queued' WHEN 'failed'
            THEN '5.1.1 Mailbox does not exist' WHEN 'dead' THEN '4.3.0 Try later' END
FROM generate_series(1, :rows) AS i,
     LATERAL (SELECT CASE WHEN i % 1000 < 20 THEN 'pending' WHEN i % 1000 < 50 THEN 'failed'
                          WHEN i % 1000 < 70 THEN 'dead' WHEN i % 1000 < 75 THEN 'cancelled'
                          WHEN i % 1000 < 78 THEN 'unknown' ELSE 'sent' END AS status) AS s,
     LATERAL (SELECT now() - interval '30 days' * (1 - i::float8 / :rows) AS created) AS t
"""
FILL_ATTEMPTS = """
INSERT INTO mailout_attempts (outbox_id, attempt, outcome, stage, reply_code, reply_text,
    worker, started_at, finished_at)
SELECT id, 1,
       CASE status WHEN 'sent' THEN 'sent' WHEN 'failed' THEN 'failed' WHEN 'dead' THEN 'dead'
            WHEN 'unknown' THEN 'unknown' ELSE 'retry' END,
       CASE status WHEN 'sent' THEN 'body' ELSE 'rcpt' END,
       last_reply_code, last_reply_text, 'bench:1', created_at + interval '1 second',
       created_at + interval '2 seconds'
FROM mailout_messages WHERE status <> 'pending'
"""


def fill(engine: Engine, rows: int) -> None:
    with engine.begin() as conn:
        conn.execute(text(FILL_MESSAGES), {"rows": rows})
        conn.execute(text(FILL_ATTEMPTS))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE mailout_messages"))
        conn.execute(text("VACUUM ANALYZE mailout_attempts"))


@contextmanager
def serve(url: str) -> Iterator[str]:
    app = create_app(url, settings=WebSettings(token=TOKEN))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        app.state.console.engine.dispose()


def pages(engine: Engine) -> dict[str, str]:
    """Page name -> path. The deep cursors are found once, with OFFSET, here only."""
    with engine.connect() as conn:
        deep = conn.scalar(text("SELECT id FROM mailout_messages ORDER BY id DESC "
                                "OFFSET 25000 LIMIT 1"))
        deep_sent = conn.scalar(text("SELECT id FROM mailout_messages WHERE status = 'sent' "
                                     "ORDER BY id DESC OFFSET 25000 LIMIT 1"))
        some = conn.scalar(text("SELECT max(id) / 2 FROM mailout_messages"))
    return {
        "overview": "/",
        "messages, page 1": "/messages",
        "messages, page 501": f"/messages?before={deep}",
        "messages, status=failed": "/messages?status=failed",
        "messages, sent, page 501": f"/messages?status=sent&before={deep_sent}",
        "messages, queue+template+24h": "/messages?queue=critical&template=invoice&span=24h",
        "messages, search recipient": "/messages?q=user4242@example.com",
        "message detail": f"/messages/{some}",
    }


def time_pages(base: str, paths: dict[str, str], requests: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"},
                      timeout=60) as client:
        for name, path in paths.items():
            for _ in range(3):  # warm-up: plans, caches, the renderer's templates
                assert client.get(path).status_code == 200, path
            times = []
            for _ in range(requests):
                start = time.perf_counter()
                reply = client.get(path)
                times.append(time.perf_counter() - start)
                assert reply.status_code == 200, path
            out[name] = times
    return out


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=60)
    args = parser.parse_args()
    with scratch_database() as url:
        engine = db.make_engine(url)
        migrate.upgrade(engine)
        started = time.perf_counter()
        fill(engine, args.rows)
        print(f"filled {args.rows:,} messages and their attempts in "
              f"{time.perf_counter() - started:.0f} s")
        paths = pages(engine)
        with serve(url) as base:
            results = time_pages(base, paths, args.requests)
        engine.dispose()
    print(f"\n{'page':32} {'p50 ms':>8} {'p95 ms':>8}   ({args.requests} requests each)")
    for name, times in results.items():
        print(f"{name:32} {statistics.median(times) * 1000:8.1f} {p95(times) * 1000:8.1f}")


if __name__ == "__main__":
    main()
