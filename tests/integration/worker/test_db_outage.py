"""A worker that loses its database mid-batch loses nothing and sends nothing twice."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.support.pg import EmbeddedPostgres, create_database
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import spawn_worker, worker_env
from sqlalchemy import func, select

from mailout import db
from mailout.db import migrate
from mailout.db.schema import attempts, messages
from mailout.outbox import EnqueueSettings, enqueue

pytestmark = pytest.mark.slow  # a private PostgreSQL stopped and started


@pytest.fixture
def own_postgres() -> Iterator[EmbeddedPostgres]:
    """A private server this test may stop and start (never the shared service)."""
    server = EmbeddedPostgres()
    server.start()
    yield server
    server.stop()


def test_completions_wait_for_the_database_and_nothing_is_resent(
    own_postgres: EmbeddedPostgres, smtp_server: SmtpTestServer, tmp_path: Path
) -> None:
    assert own_postgres.url is not None
    url = create_database(own_postgres.url)
    engine = db.make_engine(url)
    migrate.upgrade(engine)
    n = 30
    with engine.begin() as conn:
        for i in range(n):
            enqueue(conn, to=f"slow-after-dot+{i}@example.com", subject="Hi", text="x",
                    key=f"k{i}", settings=EnqueueSettings(message_id_domain="x.example.com"))
    engine.dispose()
    smtp_server.slow_delay = 1.0
    env = worker_env(url, smtp_server, MAILOUT_CONCURRENCY=n, MAILOUT_LEASE_SECONDS=20,
                     SMTP_TIMEOUT=5)
    log = tmp_path / "worker.log"
    worker = spawn_worker(env, "--until-idle", log=log)
    try:
        # Every message is claimed and in flight at the server; now the database goes.
        deadline = time.monotonic() + 60
        while smtp_server.connections < n:
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.02)
        own_postgres.halt()
        smtp_server.wait_for_messages(n, timeout=60)  # the in-flight sends complete
        # The worker now holds unrecorded completions: it says so when a write fails.
        deadline = time.monotonic() + 60
        while "could not record" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            assert worker.poll() is None, log.read_text()[-2000:]
            time.sleep(0.05)
        assert worker.poll() is None, log.read_text()[-2000:]
        own_postgres.resume()
        assert worker.wait(60) == 0, log.read_text()[-2000:]
    finally:
        if worker.poll() is None:
            worker.kill()
    engine = db.make_engine(url)
    with engine.connect() as conn:
        statuses = dict(conn.execute(select(messages.c.status, func.count())
                                     .group_by(messages.c.status)).all())
        tries = conn.execute(select(func.max(messages.c.attempts))).scalar_one()
        logged = conn.execute(select(func.count()).select_from(attempts)).scalar_one()
    engine.dispose()
    assert statuses == {"sent": n}
    assert tries == 1  # recorded by the same worker, within its lease: no reclaim
    assert logged == n
    received = [m.message_id for m in smtp_server.messages]
    assert len(received) == len(set(received)) == n


def test_a_worker_started_while_the_database_is_down_waits_for_it_and_sends(
    own_postgres: EmbeddedPostgres, smtp_server: SmtpTestServer, tmp_path: Path
) -> None:
    # A deployment restarting PostgreSQL and the workers together: a worker that starts
    # first must wait, not exit and leave the queue to nobody.
    assert own_postgres.url is not None
    url = create_database(own_postgres.url)
    engine = db.make_engine(url)
    migrate.upgrade(engine)
    with engine.begin() as conn:
        enqueue(conn, to="late@example.com", subject="Hi", text="x", key="late-1",
                settings=EnqueueSettings(message_id_domain="x.example.com"))
    engine.dispose()
    own_postgres.halt()
    log = tmp_path / "worker.log"
    worker = spawn_worker(worker_env(url, smtp_server), "--until-idle", log=log)
    try:
        deadline = time.monotonic() + 60
        while "database not reachable at startup" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            assert worker.poll() is None, log.read_text()[-2000:]
            time.sleep(0.05)
        own_postgres.resume()
        assert worker.wait(90) == 0, log.read_text()[-2000:]
    finally:
        if worker.poll() is None:
            worker.kill()
    [received] = smtp_server.wait_for_messages(1, timeout=10)
    assert received.rcpt_tos == ("late@example.com",)
    waits = [line for line in log.read_text().splitlines() if "at startup" in line]
    assert waits
    assert all("127.0.0.1" not in line for line in waits)  # the error's type only
