"""Enqueue and drain through PgBouncer in transaction mode: application threads
enqueue, real worker processes claim and send, all through a pool of fewer server
connections than clients, so consecutive transactions of one client land on
different server connections (where psycopg's prepared statements do not exist)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import spawn_worker, worker_env
from sqlalchemy import func, select

from mailout import db
from mailout.db.schema import messages
from mailout.outbox import EnqueueSettings, enqueue
from tests.support.pgbouncer import PgBouncer

pytestmark = pytest.mark.slow  # worker processes

SETTINGS = EnqueueSettings(message_id_domain="pgbouncer.example.com")
THREADS = 4
PER_THREAD = 75  # 300 in all
WORKERS = 3


def enqueue_from_threads(url: str) -> list[BaseException]:
    """:data:`THREADS` application threads, each enqueueing :data:`PER_THREAD`
    messages, one transaction each, on one engine through PgBouncer."""
    engine = db.make_engine(url)
    errors: list[BaseException] = []

    def app(thread: int) -> None:
        try:
            for i in range(PER_THREAD):
                with engine.begin() as conn:
                    enqueue(conn, to=f"t{thread}-{i}@example.com", subject="Order",
                            text=f"order {thread}-{i}", key=f"order-{thread}-{i}",
                            settings=SETTINGS)
        except BaseException as exc:  # reported by the test, with the thread's error
            errors.append(exc)

    threads = [threading.Thread(target=app, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engine.dispose()
    return errors


def test_threads_enqueue_and_worker_processes_drain_through_pgbouncer_exactly_once(
    bounced_url: str, pg_url: str, bouncer: PgBouncer, smtp_server: SmtpTestServer,
    tmp_path: Path,
) -> None:
    errors = enqueue_from_threads(bounced_url)
    assert not errors, errors[0]
    n = THREADS * PER_THREAD
    env = worker_env(bounced_url, smtp_server, MAILOUT_CONCURRENCY=8,
                     MAILOUT_PGBOUNCER="transaction")
    logs = [tmp_path / f"w{i}.log" for i in range(WORKERS)]
    procs = [spawn_worker(env, "--until-idle", log=log) for log in logs]
    for proc, log in zip(procs, logs, strict=True):
        assert proc.wait(timeout=180) == 0, log.read_text()[-3000:]
    worker_logs = "".join(log.read_text() for log in logs)
    assert "prepared statement" not in worker_logs
    received = [m.message_id for m in smtp_server.messages]
    assert len(received) == n
    assert len(set(received)) == n
    direct = db.make_engine(pg_url)  # the check reads PostgreSQL itself
    with direct.connect() as conn:
        statuses = dict(conn.execute(select(messages.c.status, func.count())
                                     .group_by(messages.c.status)).all())
        stored_ids = set(conn.execute(select(messages.c.message_id)).scalars())
    direct.dispose()
    assert statuses == {"sent": n}
    assert stored_ids == set(received)  # each row's own Message-ID, once


def test_make_engine_prepares_nothing_behind_pgbouncer(
    bounced_url: str,
) -> None:
    engine = db.make_engine(bounced_url)
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        assert raw.prepare_threshold is None  # type: ignore[attr-defined]
    engine.dispose()
