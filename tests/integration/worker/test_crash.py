"""Crash safety with real processes and real SIGKILLs.

The kill window: the SMTP server has accepted a message, and the worker is killed
before it records that. The server holds the row's lock (PostgreSQL) or the
database write lock (SQLite) while it replies 250, so the worker's completion write
is stuck when the SIGKILL lands: the window is hit every time, not by luck.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from bench.support.smtpserver import ReceivedMessage, SmtpTestServer
from bench.support.workers import spawn_worker, worker_env
from sqlalchemy import Connection, Engine, func, select

from mailout import db
from mailout.db.schema import attempts, messages
from mailout.outbox import EnqueueSettings, enqueue
from tests.support.locks import wait_for_lock_waiter
from tests.support.timetravel import expire_leases

pytestmark = pytest.mark.slow  # worker processes, SIGKILLed and restarted

SETTINGS = EnqueueSettings(message_id_domain="shop.example.com")
# Long: no test waits for a lease to run out (timetravel.expire_leases ends it), and a
# live worker on a busy machine must not lose one.
LEASE = 10.0


# The server takes the row's lock before its 250 (see kill_in_the_window). A send that
# timed out before the lock was held would record its outcome first, and its retry's
# claim would then skip the locked row: the window missed. So the deadline leaves the
# lock a second or more on a busy machine (and stays under the lease, as it must).
SEND_TIMEOUT = 2.5


def crash_env(db_url: str, server: SmtpTestServer, **extra: object) -> dict[str, str]:
    # Each send on a line of its own: on SQLite that line is the sign that the worker
    # holds the 250 (see wait_until_blocked).
    return worker_env(db_url, server, MAILOUT_LEASE_SECONDS=LEASE, SMTP_TIMEOUT=SEND_TIMEOUT,
                      MAILOUT_POLL_SECONDS=0.1, MAILOUT_RETRY_BASE_SECONDS=0.05,
                      MAILOUT_RETRY_CAP_SECONDS=0.1, MAILOUT_LOG_SENDS="each", **extra)


@contextmanager
def row_locked(engine: Engine, message_id: str) -> Iterator[Connection]:
    """Block writers to the row: its lock on PostgreSQL and MariaDB, the write lock on
    SQLite."""
    if engine.dialect.name == "sqlite":
        with db.immediate(engine) as conn:
            yield conn
            conn.rollback()
        return
    with engine.connect() as conn, conn.begin():
        conn.execute(select(messages.c.id).where(messages.c.message_id == message_id)
                     .with_for_update())
        yield conn
        conn.rollback()


def wait_until_blocked(engine: Engine, log: Path, seconds: float = 60) -> None:
    """Wait until the worker's completion write is waiting on our lock; the worker's
    ``log`` is in the failure (under heavy load the wait has been seen to run out).

    SQLite shows no lock waits, so there the state waited for is the worker's log line
    for the accepted send: it is written as the attempt's completion goes to the
    writer, which cannot commit while our transaction holds the write lock."""
    deadline = time.monotonic() + seconds
    if engine.dialect.name == "sqlite":
        while "outcome=sent" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.02)
        return
    # MySQL's completion first locks the rows it still holds (SELECT ... FOR UPDATE).
    pattern = "%mailout_messages%" if engine.dialect.name == "mysql" else "UPDATE mailout_messages%"
    wait_for_lock_waiter(engine, pattern, seconds, context=lambda: log.read_text()[-3000:])


def log_of(engine: Engine, rid: int) -> list[tuple[int, str]]:
    with engine.connect() as conn:
        return [(r.attempt, r.outcome) for r in conn.execute(
            select(attempts.c.attempt, attempts.c.outcome)
            .where(attempts.c.outbox_id == rid).order_by(attempts.c.id))]


def row(engine: Engine, rid: int) -> dict[str, object]:
    with engine.connect() as conn:
        return dict(conn.execute(select(messages).where(messages.c.id == rid)).one()._mapping)


def kill_in_the_window(engine: Engine, db_url: str, server: SmtpTestServer,
                       tmp_path: Path) -> int:
    """Enqueue one message and SIGKILL its worker after the 250, before the commit."""
    with engine.begin() as conn:
        res = enqueue(conn, to="buyer@example.com", subject="Your order", text="Thanks",
                      key="order-1234-confirmation", settings=SETTINGS)
    locked = threading.Event()
    release = threading.Event()

    def hold_the_row() -> None:
        with row_locked(engine, res.message_id):
            locked.set()
            release.wait(30)

    def before_reply(message: ReceivedMessage) -> None:
        # Runs before the server's 250: lock first, so the worker's commit must wait.
        assert message.message_id == res.message_id
        server.before_reply = None  # only the first delivery
        threading.Thread(target=hold_the_row, daemon=True).start()
        assert locked.wait(10)

    server.before_reply = before_reply
    with engine.connect():
        pass  # a pooled connection ready for the lock: taking it must be quick
    worker = spawn_worker(crash_env(db_url, server), log=tmp_path / "first.log")
    try:
        assert locked.wait(20), (tmp_path / "first.log").read_text()[-2000:]
        wait_until_blocked(engine, tmp_path / "first.log")
        worker.send_signal(signal.SIGKILL)
        assert worker.wait(10) == -signal.SIGKILL
    finally:
        release.set()
        if worker.poll() is None:
            worker.kill()
    return res.id


def test_a_kill_between_accept_and_commit_is_resent_once_and_deduplicated(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer, tmp_path: Path
) -> None:
    smtp_server.dedup = True  # like a provider deduplicating on Message-ID / the key header
    rid = kill_in_the_window(engine, db_url, smtp_server, tmp_path)
    assert len(smtp_server.messages) == 1
    stuck = row(engine, rid)
    assert stuck["status"] == "sending"
    assert stuck["attempts"] == 1

    assert expire_leases(engine) == 1  # the dead worker's lease runs out
    second = spawn_worker(crash_env(db_url, smtp_server), "--until-idle",
                          log=tmp_path / "second.log")
    assert second.wait(30) == 0, (tmp_path / "second.log").read_text()[-2000:]

    done = row(engine, rid)
    assert done["status"] == "sent"
    assert done["attempts"] == 2
    # the attempt that died is on record as unknown, then the resend
    assert log_of(engine, rid) == [(1, "unknown"), (2, "sent")]
    # the resend carried the same Message-ID and key, so the provider kept one copy
    assert smtp_server.dedup_hits == 1
    assert len(smtp_server.messages) == 1
    assert smtp_server.messages[0].message_id == done["message_id"]
    assert smtp_server.messages[0].idempotency_key == "order-1234-confirmation"


def test_without_provider_dedup_the_duplicate_is_tied_to_an_unknown_attempt(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer, tmp_path: Path
) -> None:
    rid = kill_in_the_window(engine, db_url, smtp_server, tmp_path)
    assert expire_leases(engine) == 1
    second = spawn_worker(crash_env(db_url, smtp_server), "--until-idle",
                          log=tmp_path / "second.log")
    assert second.wait(30) == 0
    first, resend = smtp_server.messages
    assert first.message_id == resend.message_id == row(engine, rid)["message_id"]
    assert first.idempotency_key == resend.idempotency_key
    unknown = [a for a in log_of(engine, rid) if a[1] == "unknown"]
    assert len(smtp_server.messages) - 1 <= len(unknown)


def test_on_unknown_hold_parks_the_row_instead_of_resending(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer, tmp_path: Path
) -> None:
    rid = kill_in_the_window(engine, db_url, smtp_server, tmp_path)
    assert expire_leases(engine) == 1
    env = crash_env(db_url, smtp_server, MAILOUT_ON_UNKNOWN="hold")
    second = spawn_worker(env, "--until-idle", log=tmp_path / "second.log")
    # Exit 5: the run parked a message unknown (finished, not sent).
    assert second.wait(30) == 5, (tmp_path / "second.log").read_text()[-2000:]
    parked = row(engine, rid)
    assert parked["status"] == "unknown"
    assert parked["lease_token"] is None
    assert parked["attempts"] == 1  # the parking claim sent nothing and is not charged
    # The decision is logged too (issue 39), uncharged: its attempt number is given back.
    assert log_of(engine, rid) == [(1, "unknown"), (2, "parked")]
    assert len(smtp_server.messages) == 1  # not resent


def test_a_lost_reply_under_hold_is_parked(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer, tmp_path: Path
) -> None:
    with engine.begin() as conn:
        rid = enqueue(conn, to="drop-after-dot@example.com", subject="Hi", text="x",
                      key="k-hold", settings=SETTINGS).id
    env = crash_env(db_url, smtp_server, MAILOUT_ON_UNKNOWN="hold")
    proc = spawn_worker(env, "--until-idle", log=tmp_path / "w.log")
    assert proc.wait(30) == 5  # parked unknown: finished, not sent
    assert row(engine, rid)["status"] == "unknown"
    assert log_of(engine, rid) == [(1, "unknown")]
    assert len(smtp_server.messages) == 1


def test_sigkill_of_every_worker_then_a_restart_finishes_the_queue(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer, tmp_path: Path
) -> None:
    n = 60
    with engine.begin() as conn:
        for i in range(n):
            enqueue(conn, to=f"slow-after-dot+{i}@example.com", subject="Hi", text="x",
                    key=f"k{i}", settings=SETTINGS)
    smtp_server.slow_delay = 0.2
    env = crash_env(db_url, smtp_server, MAILOUT_CONCURRENCY=4)
    procs = [spawn_worker(env, log=tmp_path / f"w{i}.log") for i in range(3)]
    deadline = time.monotonic() + 20
    while len(smtp_server.messages) < 15 and time.monotonic() < deadline:
        time.sleep(0.02)
    for p in procs:
        p.send_signal(signal.SIGKILL)
    for p in procs:
        p.wait(10)
    with engine.connect() as conn:
        left = conn.execute(select(func.count()).where(messages.c.status != "sent")).scalar_one()
    assert left > 0  # the kill really interrupted the run

    smtp_server.slow_delay = 0
    expire_leases(engine)  # the dead workers' leases run out
    final = spawn_worker(env, "--until-idle", log=tmp_path / "final.log")
    assert final.wait(60) == 0
    with engine.connect() as conn:
        statuses = dict(conn.execute(select(messages.c.status, func.count())
                                     .group_by(messages.c.status)).all())
        unknown = conn.execute(select(func.count()).select_from(attempts)
                               .where(attempts.c.outcome == "unknown")).scalar_one()
    assert statuses == {"sent": n}
    received = [m.message_id for m in smtp_server.messages]
    assert set(received) == set(_message_ids(engine))
    duplicates = len(received) - len(set(received))
    assert duplicates <= unknown


def _message_ids(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(select(messages.c.message_id)).scalars())


@pytest.fixture(autouse=True)
def _no_hooks_left(smtp_server: SmtpTestServer) -> Iterator[None]:
    yield
    smtp_server.before_reply = None
