"""The worker's hard cases through PgBouncer in transaction mode: wake-ups with
LISTEN on its own URL (and polling without it), a SIGKILL mid-send, a provider
outage. Checks read PostgreSQL directly, never through the pooler under test."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import spawn_worker, worker_env
from sqlalchemy import Engine, func, select, text

from mailout import db
from mailout.db.schema import attempts, messages
from mailout.outbox import EnqueueSettings, enqueue
from tests.integration.worker.test_crash import crash_env, kill_in_the_window, log_of, row
from tests.integration.worker.test_outage import FAST, free_port
from tests.support.timetravel import expire_leases

pytestmark = pytest.mark.slow  # worker processes

SETTINGS = EnqueueSettings(message_id_domain="pgbouncer.example.com")
LONG_POLL = 60.0  # a delivery much sooner than this came from a wake-up, not a poll
WAKE_WITHIN = 10.0


@pytest.fixture
def direct(pg_url: str) -> Iterator[Engine]:
    """PostgreSQL itself, for the checks and the crash test's row lock."""
    engine = db.make_engine(pg_url)
    yield engine
    engine.dispose()


def wait_for(predicate: Callable[[], object], seconds: float, context: Callable[[], str]) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, context()[-3000:]
        time.sleep(0.05)


def add(url: str, key: str) -> None:
    engine = db.make_engine(url)
    with engine.begin() as conn:
        enqueue(conn, to=f"{key}@example.com", subject="Hi", text="x", key=key,
                settings=SETTINGS)
    engine.dispose()


def listening(direct: Engine) -> int:
    with direct.connect() as conn:
        return int(conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%' "
            "AND datname = current_database()")).scalar_one())


def test_listen_url_wakes_a_worker_whose_other_connections_go_through_pgbouncer(
    bounced_url: str, pg_url: str, direct: Engine, smtp_server: SmtpTestServer,
    tmp_path: Path,
) -> None:
    log = tmp_path / "w.log"
    env = worker_env(bounced_url, smtp_server, MAILOUT_POLL_SECONDS=LONG_POLL,
                     MAILOUT_LISTEN_URL=pg_url)
    proc = spawn_worker(env, log=log)
    try:
        wait_for(lambda: listening(direct) == 1, 60, log.read_text)
        add(bounced_url, "first")  # delivered by a wake-up (start-up's or the NOTIFY)
        wait_for(lambda: len(smtp_server.messages) == 1, WAKE_WITHIN, log.read_text)
        t0 = time.monotonic()
        add(bounced_url, "second")  # only the NOTIFY can bring this one before the poll
        wait_for(lambda: len(smtp_server.messages) == 2, WAKE_WITHIN, log.read_text)
        assert time.monotonic() - t0 < LONG_POLL / 2
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert [m.idempotency_key for m in smtp_server.messages] == ["first", "second"]


def test_without_listen_url_a_worker_behind_pgbouncer_polls_and_says_so(
    bounced_url: str, direct: Engine, smtp_server: SmtpTestServer, tmp_path: Path,
) -> None:
    log = tmp_path / "w.log"
    env = worker_env(bounced_url, smtp_server)
    del env["MAILOUT_POLL_SECONDS"]  # the default under test
    proc = spawn_worker(env, log=log)
    try:
        wait_for(lambda: "polling every" in log.read_text(), 60, log.read_text)
        add(bounced_url, "polled")
        wait_for(lambda: len(smtp_server.messages) == 1, WAKE_WITHIN, log.read_text)
        assert listening(direct) == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    text_ = log.read_text()
    assert text_.count("no LISTEN, polling every 0.2 s") == 1


def test_a_worker_killed_mid_send_through_pgbouncer_is_resent_once_and_deduplicated(
    bounced_url: str, direct: Engine, smtp_server: SmtpTestServer, tmp_path: Path,
) -> None:
    smtp_server.dedup = True  # like a provider deduplicating on Message-ID / the key header
    rid = kill_in_the_window(direct, bounced_url, smtp_server, tmp_path)
    stuck = row(direct, rid)
    assert (stuck["status"], stuck["attempts"]) == ("sending", 1)
    assert expire_leases(direct) == 1
    second = spawn_worker(crash_env(bounced_url, smtp_server), "--until-idle",
                          log=tmp_path / "second.log")
    assert second.wait(60) == 0, (tmp_path / "second.log").read_text()[-2000:]
    done = row(direct, rid)
    assert (done["status"], done["attempts"]) == ("sent", 2)
    assert log_of(direct, rid) == [(1, "unknown"), (2, "sent")]
    assert smtp_server.dedup_hits == 1
    assert [m.message_id for m in smtp_server.messages] == [done["message_id"]]


def test_a_provider_outage_through_pgbouncer_ends_with_everything_sent_once(
    bounced_url: str, direct: Engine, tmp_path: Path,
) -> None:
    n = 12
    for i in range(n):
        add(bounced_url, f"outage-{i}")
    server = SmtpTestServer(port=free_port())  # not started yet: nothing listens
    log = tmp_path / "w.log"

    def outage_attempts() -> int:
        with direct.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(attempts).where(
                attempts.c.outcome == "outage")).scalar_one())

    def statuses() -> set[str]:
        with direct.connect() as conn:
            return set(conn.execute(select(messages.c.status)).scalars())

    proc = spawn_worker(worker_env(bounced_url, server, **FAST), log=log)
    try:
        wait_for(lambda: outage_attempts() >= 3, 60, log.read_text)
        assert statuses() <= {"pending", "sending"}
        server.start()  # the provider comes back on the port the worker knows
        wait_for(lambda: statuses() == {"sent"}, 60, log.read_text)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        server.stop()
    received = [m.message_id for m in server.messages]
    assert len(received) == len(set(received)) == n
    with direct.connect() as conn:
        charged = conn.execute(select(func.count()).select_from(attempts)
                               .where(attempts.c.charged)).scalar_one()
    assert charged == n  # one charged attempt each: the send that worked
