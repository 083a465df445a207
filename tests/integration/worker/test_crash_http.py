"""Crash safety over HTTP APIs: a real worker process SIGKILLed between the provider's
2xx and the row's commit, then a second worker resends.

The kill window is hit every time, as in ``test_crash``: the fake provider, before
answering 200, takes the row's lock (PostgreSQL) or the write lock (SQLite), so the
worker's completion is stuck when the SIGKILL lands. Against Resend's fake, which
keeps each idempotency key for its window, the resend is dropped by the provider:
one delivery, the row ``sent``, the unknown attempt on record, under either
``MAILOUT_ON_UNKNOWN`` policy. Against Postmark's, which has no key, the policy
decides: ``resend`` delivers a second copy (tied to the unknown attempt), ``hold``
parks the row.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from bench.support.providers.postmark import FakePostmark
from bench.support.providers.resend import FakeResend
from bench.support.providers.server import Delivery, FakeProvider
from bench.support.workers import MAIL_FROM, spawn_worker
from sqlalchemy import Engine, select

from mailout.db.schema import attempts
from mailout.outbox import enqueue
from tests.integration.worker.test_crash import (
    LEASE,
    SEND_TIMEOUT,
    SETTINGS,
    row,
    row_locked,
    wait_until_blocked,
)
from tests.support.timetravel import expire_leases, make_due
from tests.support.transport_harness import provider_url

pytestmark = pytest.mark.slow  # worker processes, SIGKILLed and restarted

# How long a worker process may take to start, claim and send: generous, since it is
# only ever reached when something is wrong, and a loaded machine starts Python slowly.
PROCESS_DEADLINE = 120


def http_env(db_url: str, fake: FakeProvider, **extra: object) -> dict[str, str]:
    env = {"MAILOUT_DATABASE_URL": db_url, "MAIL_FROM": MAIL_FROM,
           "MAILOUT_TRANSPORT": provider_url(fake.name, fake.secret, fake.url,
                                              timeout=str(SEND_TIMEOUT)),
           "MAILOUT_LEASE_SECONDS": str(LEASE), "MAILOUT_POLL_SECONDS": "0.1",
           "MAILOUT_RETRY_BASE_SECONDS": "0.05", "MAILOUT_RETRY_CAP_SECONDS": "0.1",
           "MAILOUT_LOG_SENDS": "each"}  # the line wait_until_blocked waits for on SQLite
    env.update({k: str(v) for k, v in extra.items()})
    return env


def log_of(engine: Engine, rid: int) -> list[tuple[int, str, str | None, str | None]]:
    with engine.connect() as conn:
        return [(r.attempt, r.outcome, r.transport, r.detail) for r in conn.execute(
            select(attempts).where(attempts.c.outbox_id == rid).order_by(attempts.c.id))]


def kill_in_the_window(engine: Engine, db_url: str, fake: FakeProvider, tmp_path: Path,
                       **extra: object) -> int:
    with engine.begin() as conn:
        res = enqueue(conn, to="buyer@example.com", subject="Your order", text="Thanks",
                      key="order-1234-confirmation", settings=SETTINGS)
    locked, release = threading.Event(), threading.Event()

    def hold_the_row() -> None:
        with row_locked(engine, res.message_id):
            locked.set()
            release.wait(30)

    def before_reply(delivery: Delivery) -> None:
        fake.before_reply = None  # only the first delivery
        threading.Thread(target=hold_the_row, daemon=True).start()
        assert locked.wait(10)

    fake.before_reply = before_reply
    with engine.connect():
        pass  # a pooled connection ready for the lock: taking it must be quick
    worker = spawn_worker(http_env(db_url, fake, **extra), log=tmp_path / "first.log")
    try:
        assert locked.wait(PROCESS_DEADLINE), (tmp_path / "first.log").read_text()[-2000:]
        wait_until_blocked(engine, tmp_path / "first.log")
        worker.send_signal(signal.SIGKILL)
        assert worker.wait(10) == -signal.SIGKILL
    finally:
        release.set()
        if worker.poll() is None:
            worker.kill()
    assert len(fake.delivered) == 1  # the provider has it; the row does not know
    return res.id


def restart(engine: Engine, db_url: str, fake: FakeProvider, tmp_path: Path,
            exit_code: int = 0, **extra: object) -> None:
    """A second worker until idle; ``exit_code`` 5 when it parks the row (not sent)."""
    assert expire_leases(engine) == 1  # the dead worker's lease runs out
    second = spawn_worker(http_env(db_url, fake, **extra), "--until-idle",
                          log=tmp_path / "second.log")
    assert second.wait(PROCESS_DEADLINE) == exit_code, \
        (tmp_path / "second.log").read_text()[-2000:]


FAKES: dict[str, Callable[[], FakeProvider]] = {"resend": FakeResend,
                                                  "postmark": FakePostmark}


@pytest.mark.parametrize("policy", ["resend", "hold"])
def test_with_a_key_the_provider_drops_the_resend_one_delivery(
    engine: Engine, db_url: str, tmp_path: Path, policy: str,
) -> None:
    with FakeResend() as fake:
        rid = kill_in_the_window(engine, db_url, fake, tmp_path, MAILOUT_ON_UNKNOWN=policy)
        restart(engine, db_url, fake, tmp_path, MAILOUT_ON_UNKNOWN=policy)
        done = row(engine, rid)
        assert done["status"] == "sent"
        assert (len(fake.delivered), fake.dedupe_hits) == (1, 1)  # one delivery
        assert done["provider_message_id"] == fake.delivered[0].provider_id
        [(n1, abandoned, via1, _), (n2, sent, via2, detail)] = log_of(engine, rid)
        assert (n1, abandoned, via1) == (1, "unknown", "resend")
        assert (n2, sent, via2) == (2, "sent", "resend")
        assert detail is not None
        assert "inside resend's 86400s key window" in detail
        assert fake.violations == []


def test_without_a_key_resend_policy_delivers_a_copy_tied_to_the_unknown_attempt(
    engine: Engine, db_url: str, tmp_path: Path,
) -> None:
    with FakePostmark() as fake:
        rid = kill_in_the_window(engine, db_url, fake, tmp_path)
        restart(engine, db_url, fake, tmp_path)
        assert row(engine, rid)["status"] == "sent"
        first, copy = fake.delivered  # two deliveries: Postmark keeps no key
        assert first.message_id == copy.message_id == row(engine, rid)["message_id"]
        [(_, abandoned, _, _), (_, sent, _, detail)] = log_of(engine, rid)
        assert (abandoned, sent) == ("unknown", "sent")
        assert detail is not None
        assert "postmark drops no repeated key" in detail


def test_without_a_key_hold_policy_parks_the_row(
    engine: Engine, db_url: str, tmp_path: Path,
) -> None:
    with FakePostmark() as fake:
        rid = kill_in_the_window(engine, db_url, fake, tmp_path, MAILOUT_ON_UNKNOWN="hold")
        restart(engine, db_url, fake, tmp_path, exit_code=5, MAILOUT_ON_UNKNOWN="hold")
        parked = row(engine, rid)
        assert (parked["status"], parked["attempts"]) == ("unknown", 1)
        assert len(fake.delivered) == 1  # not resent
        log = log_of(engine, rid)
        assert [(a, o) for a, o, _, _ in log] == [(1, "unknown"), (2, "parked")]
        assert log[-1][3] == ("after unknown: postmark drops no repeated key; "
                              "MAILOUT_ON_UNKNOWN=hold: parked for review, not sent")


def test_a_lost_answer_is_resent_inside_the_window_even_under_hold(
    engine: Engine, db_url: str, tmp_path: Path,
) -> None:
    """No crash: the connection drops after the body (unknown), the worker itself
    resends at once with the same key, and Resend answers with the first id."""
    with FakeResend() as fake:
        fake.lose("lost@example.com")

        def answer_again(delivery: Delivery) -> None:
            fake.faults.clear()  # this one is dropped; the provider answers the next

        fake.before_reply = answer_again
        with engine.begin() as conn:
            rid = enqueue(conn, to="lost@example.com", subject="Hi", text="x", key="k-lost",
                          settings=SETTINGS).id
        env = http_env(db_url, fake, MAILOUT_ON_UNKNOWN="hold")
        for _ in range(2):  # --until-idle leaves before the resend falls due: run again
            proc = spawn_worker(env, "--until-idle", log=tmp_path / "w.log")
            assert proc.wait(PROCESS_DEADLINE) == 0, (tmp_path / "w.log").read_text()[-2000:]
            make_due(engine, [rid])  # its retry's backoff has passed
        assert row(engine, rid)["status"] == "sent"
        assert (len(fake.delivered), fake.dedupe_hits) == (1, 1)
        [(n1, lost, _, note), (n2, sent, _, _)] = log_of(engine, rid)
        assert (n1, lost, n2, sent) == (1, "unknown", 2, "sent")
        assert note is not None
        assert "inside the key window" in note
