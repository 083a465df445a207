"""A real worker process whose lease heartbeat raises: supervised, no lease is lost.

The heartbeat's database call raises an unexpected error (``tests.support.
faulty_worker``) while sends are in flight longer than a lease: one SMTP connection
(``SMTP_POOL_SIZE=1``) for three sends whose final reply takes 4 s each, so the third
is in flight for 12 s on an 8 s lease (each send's own deadline does not count the
wait for the connection). Restarted at once, the heartbeat keeps every lease: each
message is sent once, on its first attempt, and nothing is reclaimed. A heartbeat
that fails every time stops the worker with exit code 4, and the sends in flight
end before their leases do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import worker_env
from sqlalchemy import Engine, func, select

from mailout.db.schema import attempts, messages
from mailout.outbox import EnqueueSettings, enqueue
from mailout.transports.smtp.outcome import Stage

ROOT = Path(__file__).resolve().parents[3]
SETTINGS = EnqueueSettings(message_id_domain="side.example.com")
LEASE = 8.0  # seconds; the heartbeat runs every third of it
REPLY_DELAY = 4.0  # before the server's final reply; three sends in a row: 12 s
SMTP_TIMEOUT = 6.0  # over one send, under the lease (as the settings require)
PROCESS_DEADLINE = 180  # reached only when something is wrong
pytestmark = pytest.mark.slow  # sends in flight longer than a lease: 12 s


@pytest.fixture
def slow_server() -> Iterator[SmtpTestServer]:
    # No PIPELINING: a send waiting for the connection does not ride along on another.
    with SmtpTestServer(pipelining=False) as server:
        yield server


def enqueue_slow(engine: Engine, server: SmtpTestServer, n: int) -> list[int]:
    ids = []
    with engine.begin() as conn:
        for i in range(n):
            to = f"slow{i}@example.com"
            server.fail(to, Stage.BODY, delay=REPLY_DELAY)
            ids.append(enqueue(conn, to=to, subject="Hi", text="x", key=f"k{i}",
                               settings=SETTINGS).id)
    return ids


def run_faulty_worker(db_url: str, server: SmtpTestServer, faults: str,
                      log: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **worker_env(
        db_url, server, MAILOUT_LEASE_SECONDS=LEASE, SMTP_TIMEOUT=SMTP_TIMEOUT,
        SMTP_POOL_SIZE=1, MAILOUT_POLL_SECONDS=0.1, MAILOUT_CONCURRENCY=10,
        MAILOUT_SHUTDOWN_GRACE_SECONDS=60),
        "MAILOUT_TEST_HEARTBEAT_FAULTS": faults, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.faulty_worker", "-v", "worker", "--until-idle"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=PROCESS_DEADLINE,
        check=False)
    log.write_text(done.stderr)
    return done


def test_a_heartbeat_that_raises_is_restarted_and_no_lease_is_lost(
    engine: Engine, db_url: str, slow_server: SmtpTestServer, tmp_path: Path
) -> None:
    ids = enqueue_slow(engine, slow_server, 3)
    done = run_faulty_worker(db_url, slow_server, "2", tmp_path / "worker.log")
    assert done.returncode == 0, done.stderr[-3000:]
    # The last send was in flight for 1.5 leases, and no row was taken over: one copy
    # each, on the first try.
    received = [m.message_id for m in slow_server.messages]
    assert len(received) == len(set(received)) == len(ids), done.stderr[-3000:]
    with engine.connect() as conn:
        rows = conn.execute(select(messages.c.status, messages.c.attempts)).all()
        logged = conn.execute(select(attempts.c.outcome, func.count())
                              .group_by(attempts.c.outcome)).all()
    assert sorted(tuple(r) for r in rows) == [("sent", 1)] * len(ids)
    assert dict(logged) == {"sent": len(ids)}
    assert "reclaimed" not in done.stderr
    # The heartbeat did fail, twice, and was restarted each time.
    assert done.stderr.count("side task mailout-heartbeat failed (RuntimeError at") == 2


def test_a_heartbeat_that_always_fails_stops_the_worker_before_its_leases_run_out(
    engine: Engine, db_url: str, slow_server: SmtpTestServer, tmp_path: Path
) -> None:
    enqueue_slow(engine, slow_server, 3)
    done = run_faulty_worker(db_url, slow_server, "always", tmp_path / "worker.log")
    assert done.returncode == 4, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("mailout: worker failed: side task mailout-heartbeat failed 5 "
                           "times in a row (last: RuntimeError at "), last
    # The sends in flight were given up while their rows were still leased to this
    # worker: every connection to the server ended before the first lease ran out.
    with engine.connect() as conn:
        rows = conn.execute(select(messages.c.status, messages.c.lease_expires_at)).all()
    left = [_aware(expires) for status, expires in rows if status != "sent"]
    assert {status for status, _ in rows if status != "sent"} == {"sending"}  # to their leases
    assert left  # the stop came while sends were still waiting or in flight
    assert slow_server.disconnected_at
    assert max(slow_server.disconnected_at) < min(left)


def _aware(value: object) -> datetime:
    assert isinstance(value, datetime)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
