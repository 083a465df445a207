"""failover(A, B) after an unknown outcome on A, against real servers (issue 39).

A is a local Resend-compatible HTTP server that takes the first request and closes
the connection without a reply (mailout records ``unknown``), then answers 401 to
everything, or refuses connections, or is back. B is a real SMTP server. Inside A's
key window the message may go through A alone, under either ``MAILOUT_ON_UNKNOWN``:
0 copies through B. Outside it the policy decides, and the attempt log says which.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import Iterator

import pytest
from bench.support.providers.resend import FakeResend
from bench.support.providers.resend import error as resend_error
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import MAIL_FROM, run_until_idle
from sqlalchemy import Engine, select

from mailout import db
from mailout.db.schema import attempts, messages
from mailout.outbox import EnqueueSettings, enqueue
from mailout.support.alerts import Alert
from mailout.worker import config
from mailout.worker.build import build_worker
from tests.support.timetravel import age_unknown, make_due
from tests.support.transport_harness import provider_url

SETTINGS = EnqueueSettings(message_id_domain="shop.example.com")
UNAUTHORIZED = resend_error(401, "missing_api_key", "Missing API key")
PINNED = "pinned@example.com"
TWO_DAYS = 2 * 86400.0


class A(enum.Enum):
    """What provider A does after it took the first request without a reply."""

    UNAUTHORIZED = "401"  # answers 401 to everything
    REFUSING = "refusing"  # its port refuses connections
    BACK = "back"  # answers again (with the first answer, for the same key)


def settings(db_url: str, a: FakeResend, b: SmtpTestServer, policy: str) -> config.Settings:
    resend = provider_url("resend", a.secret, a.url, timeout="2")
    return config.load(env={
        "MAILOUT_DATABASE_URL": db_url, "MAIL_FROM": MAIL_FROM,
        "MAILOUT_TRANSPORT": f"failover({resend}, smtp://{b.host}:{b.port}?tls=none)",
        "MAILOUT_ON_UNKNOWN": policy, "MAILOUT_POLL_SECONDS": "0.05"})


def add(engine: Engine, to: str, key: str) -> int:
    with engine.begin() as conn:
        return enqueue(conn, to=to, subject="Hi", text="x", key=key, settings=SETTINGS).id


def log_of(engine: Engine, row: int) -> list[tuple[str, str | None, str | None]]:
    with engine.connect() as conn:
        return [(r.outcome, r.transport, r.detail) for r in conn.execute(
            select(attempts).where(attempts.c.outbox_id == row).order_by(attempts.c.id))]


def row_of(engine: Engine, row: int) -> tuple[str, int]:
    with engine.connect() as conn:
        found = conn.execute(select(messages.c.status, messages.c.attempts)
                             .where(messages.c.id == row)).one()
        return found.status, found.attempts


def through_b(b: SmtpTestServer, to: str) -> int:
    return sum(1 for m in b.messages if to in m.rcpt_tos)


@contextlib.contextmanager
def first_request_lost(engine: Engine, db_url: str, policy: str
                       ) -> Iterator[tuple[FakeResend, SmtpTestServer, int]]:
    """A and B running, and one message whose attempt through A ended unknown."""
    with FakeResend() as a, SmtpTestServer() as b:
        a.lose(PINNED)  # take it, then close the connection without a reply
        a.before_reply = lambda _: a.answer_always(UNAUTHORIZED)  # and 401 from then on
        row = add(engine, PINNED, "pinned")
        run_until_idle(settings(db_url, a, b, policy))
        assert [(o, t) for o, t, _ in log_of(engine, row)] == [("unknown", "resend")]
        assert (len(a.delivered), through_b(b, PINNED)) == (1, 0)
        yield a, b, row


def then(a: FakeResend, state: A) -> None:
    a.before_reply = None
    a.faults.clear()
    if state is A.BACK:
        a.answer_always(None)
    elif state is A.REFUSING:
        a.__exit__(None, None, None)  # the port now refuses connections


@pytest.mark.parametrize("policy", ["resend", "hold"])
@pytest.mark.parametrize("state", list(A), ids=lambda s: s.value)
def test_inside_the_window_of_a_the_message_goes_through_a_alone(
        sqlite_url: str, policy: str, state: A) -> None:
    engine = db.make_engine(sqlite_url)
    with first_request_lost(engine, sqlite_url, policy) as (a, b, row):
        then(a, state)
        make_due(engine)
        fresh = [add(engine, f"fresh{i}@example.com", f"fresh-{i}") for i in range(3)]
        alerts: list[Alert] = []
        worker = run_until_idle(settings(sqlite_url, a, b, policy), alerts)
        assert through_b(b, PINNED) == 0  # never a second copy through B
        outcome, via, detail = log_of(engine, row)[-1]
        window = "after unknown: inside resend's 86400s key window ("
        assert detail is not None
        assert detail.startswith(window)
        if state is A.BACK:
            assert (outcome, via) == ("sent", "resend")
            assert a.dedupe_hits == 1  # A answered with the first copy's id: one copy
            assert detail.endswith("s left): resent through resend alone, same key (resend "
                                   "drops it if it has the first copy)")
            assert row_of(engine, row)[0] == "sent"
        else:
            assert (outcome, via) == ("waiting", "resend")
            why = ("resend unauthorized" if state is A.UNAUTHORIZED
                   else "resend connect_failed")
            assert f"s left): waits for resend, sent through no other; {why}; next try in " \
                   "30s" in detail
            assert row_of(engine, row) == ("pending", 1)  # the wait is not charged
            assert [x.kind for x in alerts] == ["member_down"]
        assert worker.halted is None  # --until-idle did not stop on a pause
        assert "paused" not in [x.kind for x in alerts]
        for f in fresh:  # fresh mail went on through B (A is down, or back first)
            assert row_of(engine, f)[0] == "sent"
    engine.dispose()


@pytest.mark.parametrize("policy", ["resend", "hold"])
def test_past_the_window_of_a_the_policy_decides_and_the_log_says_so(
        engine: Engine, db_url: str, policy: str) -> None:
    with first_request_lost(engine, db_url, policy) as (a, b, row):
        age_unknown(engine, TWO_DAYS)
        make_due(engine)
        run_until_idle(settings(db_url, a, b, policy))
        outcome, via, detail = log_of(engine, row)[-1]
        if policy == "resend":
            assert through_b(b, PINNED) == 1  # allowed now, and said
            assert (outcome, via) == ("sent", "smtp")
            assert detail == ("after unknown: past resend's 86400s key window; "
                              "MAILOUT_ON_UNKNOWN=resend, may duplicate; resend "
                              "unauthorized; through smtp")
        else:
            assert through_b(b, PINNED) == 0
            assert (outcome, via) == ("parked", None)
            assert detail == ("after unknown: past resend's 86400s key window; "
                              "MAILOUT_ON_UNKNOWN=hold: parked for review, not sent")
            assert row_of(engine, row) == ("unknown", 1)


def test_fresh_mail_flows_through_b_without_a_pause_while_a_pinned_message_waits(
        sqlite_url: str) -> None:
    engine = db.make_engine(sqlite_url)
    with first_request_lost(engine, sqlite_url, "hold") as (a, b, row):
        then(a, A.UNAUTHORIZED)
        make_due(engine)
        alerts: list[Alert] = []
        worker = build_worker(settings(sqlite_url, a, b, "hold"), alert_callback=alerts.append)
        latencies: list[float] = []
        paused_seen = False

        async def scenario() -> None:
            nonlocal paused_seen
            task = asyncio.create_task(worker.run())
            while log_of(engine, row)[-1][0] != "waiting":  # A was asked and went down
                paused_seen |= worker.breakers.paused
                await asyncio.sleep(0.02)
            for i in range(5):  # fresh mail, one at a time, each waited for
                started = time.monotonic()
                fresh = await asyncio.to_thread(add, engine, f"f{i}@example.com", f"f-{i}")
                while row_of(engine, fresh)[0] != "sent":
                    paused_seen |= worker.breakers.paused
                    assert time.monotonic() - started < 20, "fresh mail is stuck"
                    await asyncio.sleep(0.02)
                latencies.append(time.monotonic() - started)
            worker.stop()
            await task

        try:
            asyncio.run(scenario())
        finally:
            worker.alerts.close()
            worker.engine.dispose()
        assert not paused_seen  # the worker never paused
        assert [x.kind for x in alerts] == ["member_down"]  # one, for A's transition
        assert through_b(b, PINNED) == 0
        assert sum(1 for m in b.messages if m.rcpt_tos[0].startswith("f")) == 5
        assert row_of(engine, row) == ("pending", 1)
        # Each went out through B at once, not after a pause (MAILOUT_PAUSE_SECONDS=30).
        assert max(latencies) < 5.0, latencies
    engine.dispose()
