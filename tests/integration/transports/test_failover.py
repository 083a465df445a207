"""failover() and roundrobin() in a running worker, over local fakes of two providers.

Provider A (Resend's fake) refuses our key with 401; provider B (Postmark's fake)
works. Mail must flow through B at once (the same attempt, within one breaker
cycle), nothing may fail or pause, and the attempt log must name B. Then A comes
back: with roundrobin, traffic returns to it after its first successful probe.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.support.providers.postmark import FakePostmark
from bench.support.providers.resend import FakeResend
from bench.support.providers.resend import error as resend_error
from bench.support.workers import MAIL_FROM, run_until_idle
from sqlalchemy import Engine, func, select

from mailout.db.schema import attempts, messages
from mailout.metrics.prometheus import PrometheusObserver
from mailout.outbox import EnqueueSettings, enqueue
from mailout.support.alerts import Alert
from mailout.transports.multi import MultiTransport
from mailout.worker import config
from mailout.worker.build import build_worker
from tests.support.transport_harness import provider_url

SETTINGS = EnqueueSettings(message_id_domain="shop.example.com")
UNAUTHORIZED = resend_error(401, "missing_api_key", "Missing API key")


def settings(db_url: str, mode: str, a: FakeResend, b: FakePostmark,
             **env: str) -> config.Settings:
    members = ", ".join(provider_url(f.name, f.secret, f.url) for f in (a, b))
    return config.load(env={
        "MAILOUT_DATABASE_URL": db_url, "MAIL_FROM": MAIL_FROM,
        "MAILOUT_TRANSPORT": f"{mode}({members})", "MAILOUT_POLL_SECONDS": "0.05",
        "MAILOUT_PAUSE_SECONDS": "0.5", "MAILOUT_PAUSE_CAP_SECONDS": "1",
        "MAILOUT_CONCURRENCY": "2", **env})


def add(engine: Engine, n: int, prefix: str) -> None:
    with engine.begin() as conn:
        for i in range(n):
            enqueue(conn, to=f"{prefix}{i}@example.com", subject="Hi", text="x",
                    key=f"{prefix}-{i}", settings=SETTINGS)


def attempt_log(engine: Engine) -> list[tuple[str, str | None, str | None]]:
    with engine.connect() as conn:
        return [(r.outcome, r.transport, r.detail)
                for r in conn.execute(select(attempts).order_by(attempts.c.id))]


def statuses(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return dict(conn.execute(select(messages.c.status, func.count())  # type: ignore[arg-type]
                                 .group_by(messages.c.status)).all())


def test_a_401_on_a_moves_mail_to_b_in_the_same_attempt(engine: Engine, db_url: str) -> None:
    with FakeResend() as a, FakePostmark() as b:
        a.answer_always(UNAUTHORIZED)
        add(engine, 10, "f")
        worker = run_until_idle(settings(db_url, "failover", a, b))
        assert statuses(engine) == {"sent": 10}
        assert (len(a.delivered), len(b.delivered)) == (0, 10)
        assert not worker.breakers.paused  # B works: the worker never paused
        log = attempt_log(engine)
        assert [(o, t) for o, t, _ in log] == [("sent", "postmark")] * 10
        first_detail = log[0][2] or ""
        assert "resend unauthorized; through postmark" in first_detail
        assert a.secret not in str(log)


def test_ten_sends_in_flight_to_a_member_answering_401_fire_one_alert(
        engine: Engine, db_url: str) -> None:
    with FakeResend() as a, FakePostmark() as b:
        a.answer_always(UNAUTHORIZED)
        a.delay = 0.3  # the ten 401s come late: all ten sends are in flight to A together
        add(engine, 10, "f")
        alerts: list[Alert] = []
        observer = PrometheusObserver()
        run_until_idle(settings(db_url, "failover", a, b, MAILOUT_CONCURRENCY="10",
                                MAILOUT_PAUSE_SECONDS="30",
                                MAILOUT_PAUSE_CAP_SECONDS="600"), alerts, observer=observer)
        assert len(a.requests) == 10
        assert statuses(engine) == {"sent": 10}
        assert [(x.kind, x.details["member"], x.details["reason"]) for x in alerts] == [
            ("member_down", "resend", "unauthorized")]
        assert alerts[0].details["seconds"] == 30
        gauge = observer.registry.get_sample_value
        assert gauge("mailout_transport_member_state", {
            "transport": "failover", "member": "resend", "state": "down",
            "reason": "unauthorized"}) == 1
        assert gauge("mailout_transport_member_state", {
            "transport": "failover", "member": "postmark", "state": "up", "reason": ""}) == 1
        assert gauge("mailout_transport_member_state", {
            "transport": "failover", "member": "resend", "state": "up", "reason": ""}) is None


def test_roundrobin_returns_traffic_to_a_once_it_is_back(engine: Engine, db_url: str) -> None:
    with FakeResend() as a, FakePostmark() as b:
        a.answer_always(UNAUTHORIZED)
        alerts: list[Alert] = []
        worker = build_worker(settings(db_url, "roundrobin", a, b), alert_callback=alerts.append)

        async def scenario() -> None:
            task = asyncio.create_task(worker.run())
            await asyncio.to_thread(add, engine, 6, "down")
            await until(lambda: len(b.delivered) == 6)
            assert a.delivered == []
            a.answer_always(None)  # A is back
            multi = worker.lanes[0].ctx.transport
            assert isinstance(multi, MultiTransport)
            await until(lambda: multi.health.available("resend"))  # past its down time
            await asyncio.to_thread(add, engine, 10, "up")  # the first on A's turn probes it
            await until(lambda: len(a.delivered) + len(b.delivered) == 16)
            assert [x.kind for x in alerts] == ["member_down", "member_up"]
            worker.stop()
            await task

        try:
            asyncio.run(scenario())
        finally:
            worker.engine.dispose()
        assert statuses(engine) == {"sent": 16}
        assert len(a.delivered) >= 3  # traffic went back to A, in turns with B
        assert len(b.delivered) >= 6 + 3
        sent_via = {t for o, t, _ in attempt_log(engine)[6:] if o == "sent"}
        assert sent_via == {"resend", "postmark"}


async def until(condition: Any, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
