"""Metrics, health, alerts and logs of a real worker: real SMTP, real databases, real HTTP."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import run_until_idle, settings_for, spawn_worker, worker_env
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, text, update

from mailout.db.schema import messages
from mailout.metrics.collectors import CACHE_SECONDS
from mailout.metrics.prometheus import MetricsServer, PrometheusObserver, start_metrics_server
from mailout.outbox import EnqueueSettings, enqueue
from mailout.support.logs import JsonFormatter, LogSends, configure_logging
from mailout.worker.build import build_worker
from mailout.worker.config import Settings
from mailout.worker.runtime import Worker
from tests.support.fixtures import AUTH_USER

SETTINGS = EnqueueSettings(message_id_domain="obs.example.com")
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def add(engine: Engine, recipients: list[str], *, queue: str = "default", prefix: str = "m",
        body: str = "Hello", **kw: Any) -> list[int]:
    with engine.begin() as conn:
        return [enqueue(conn, to=to, subject="Your order", text=body, queue=queue,
                        key=f"{prefix}-{i}", settings=SETTINGS, **kw).id
                for i, to in enumerate(recipients)]


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def scrape(server: MetricsServer) -> Samples:
    status, body = http_get(server.url + "/metrics")
    assert status == 200, body
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body) for s in family.samples}


def scrape_fresh(server: MetricsServer, observer: object) -> tuple[Samples, float]:
    """Scrape until a scrape ran a new queue query (its cached result ran out): the
    samples of that scrape, and when it started (the new cache runs from there)."""
    assert isinstance(observer, PrometheusObserver)
    collector = observer.queue_collector
    assert collector is not None
    before = collector.queries
    deadline = time.monotonic() + 60
    while True:
        started = time.monotonic()
        samples = scrape(server)
        if collector.queries > before:
            return samples, started
        assert time.monotonic() < deadline, "no new queue query within 60 s"
        time.sleep(0.05)


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def sends(samples: Samples, outcome: str, queue: str = "default") -> float | None:
    return value(samples, "mailout_sends_total", outcome=outcome, queue=queue)


async def until(check: Callable[[], bool], seconds: float = 10.0) -> None:
    """Poll ``check`` (run in a thread: it may do HTTP) until true; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not await asyncio.to_thread(check):
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {seconds}s: {check.__doc__ or check}")
        await asyncio.sleep(0.05)


Scenario = Callable[[Worker, MetricsServer], Awaitable[None]]


def run_with_metrics(settings: Settings, scenario: Scenario, **kw: Any) -> Worker:
    """Run an in-process worker with its metrics server while ``scenario`` runs."""
    worker = build_worker(settings, observer=PrometheusObserver(), **kw)
    server = start_metrics_server(0, worker, host="127.0.0.1")

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        try:
            await scenario(worker, server)
        finally:
            worker.stop()
            await task

    try:
        asyncio.run(main())
    finally:
        server.close()
        worker.alerts.close()
        worker.engine.dispose()
    return worker


def test_metrics_count_sends_retries_dead_letters_and_show_the_queues(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer
) -> None:
    # Outside the worker's queue: a backlog nobody serves, one due for an hour.
    waiting = add(engine, ["b1@example.com", "b2@example.com"], queue="bulk", prefix="bulk")
    with engine.begin() as conn:
        conn.execute(update(messages).where(messages.c.id == waiting[0]).values(
            next_attempt_at=datetime.now(UTC) - timedelta(hours=1)))
    add(engine, ["later@example.com"], prefix="later",
        send_at=datetime.now(UTC) + timedelta(hours=1))
    # A row abandoned by a dead worker: its lease ran out, it will be reclaimed.
    (orphan,) = add(engine, ["orphan@example.com"], prefix="orphan")
    with engine.begin() as conn:
        conn.execute(update(messages).where(messages.c.id == orphan).values(
            status="sending", attempts=1, lease_owner="gone:1:x", lease_token="stale",
            lease_expires_at=datetime.now(UTC) - timedelta(minutes=1),
            last_attempt_at=datetime.now(UTC) - timedelta(minutes=3),
            created_at=datetime.now(UTC) - timedelta(minutes=5)))
    settings = settings_for(db_url, smtp_server, MAILOUT_MAX_ATTEMPTS=2,
                            MAILOUT_RETRY_BASE_SECONDS=0.05, MAILOUT_RETRY_CAP_SECONDS=0.1)

    async def scenario(worker: Worker, server: MetricsServer) -> None:
        def first_sent() -> bool:
            """the three plain messages and the orphan are sent"""
            return sends(scrape(server), "sent") == 4
        add(engine, [f"user{i}@example.com" for i in range(3)], prefix="plain")
        await until(first_sent)
        s = scrape(server)
        assert value(s, "mailout_lease_reclaims_total", queue="default") == 1
        assert sends(s, "retry") == sends(s, "dead") == sends(s, "failed") == 0

        await asyncio.to_thread(add, engine, ["rcpt-451-once@example.com", "rcpt-451@example.com",
                                              "rcpt-550@example.com"], prefix="bad")

        def all_done() -> bool:
            """the retried one is sent, the refused one failed, the 451 one dead"""
            s = scrape(server)
            return (sends(s, "sent"), sends(s, "dead"), sends(s, "failed")) == (5, 1, 1)
        await until(all_done)
        s = scrape(server)
        assert sends(s, "retry") == 2  # 451-once, then the first try of the dead one
        assert value(s, "mailout_attempt_duration_seconds_count", queue="default") == 9
        assert value(s, "mailout_delivery_latency_seconds_count", queue="default") == 5
        # The orphan waited minutes: its end-to-end latency says so.
        assert value(s, "mailout_delivery_latency_seconds_bucket", queue="default",
                     le="60.0") == 4
        # queue metrics are cached for a second: the next query's
        s, _ = await asyncio.to_thread(scrape_fresh, server, worker.observer)
        assert value(s, "mailout_queue_messages", queue="bulk", status="pending") == 2
        assert value(s, "mailout_queue_due_messages", queue="bulk") == 2
        age = value(s, "mailout_queue_oldest_due_age_seconds", queue="bulk")
        assert age is not None
        assert 3590 < age < 3700
        assert value(s, "mailout_queue_messages", queue="default", status="pending") == 1
        assert value(s, "mailout_queue_messages", queue="default", status="sending") == 0
        assert value(s, "mailout_queue_due_messages", queue="default") == 0
        assert value(s, "mailout_queue_oldest_due_age_seconds", queue="default") == 0
        assert value(s, "mailout_transport_paused") == 0
        assert value(s, "mailout_database_up") == 1
        assert value(s, "mailout_scrape_errors_total") == 0
        info = [labels for (name, labels), v in s.items() if name == "mailout_worker_info"]
        assert len(info) == 1
        assert dict(info[0])["lanes"] == "default(default):10"
        assert dict(info[0])["worker"] == worker.name
        assert http_get(server.url + "/healthz")[0] == 200
        assert http_get(server.url + "/readyz") == (200, "ready\n")

    run_with_metrics(settings, scenario, queues=["default"])


def test_a_failing_queue_query_keeps_metrics_up_and_counts_a_scrape_error(
    tmp_path: Path, smtp_server: SmtpTestServer
) -> None:
    from mailout import db
    from mailout.db import migrate

    url = f"sqlite:///{tmp_path / 'm.db'}"
    migrate.upgrade(db.make_engine(url))
    worker = build_worker(settings_for(url, smtp_server), observer=PrometheusObserver())
    with start_metrics_server(0, worker, host="127.0.0.1") as server:
        s = scrape(server)
        assert value(s, "mailout_queue_messages", queue="default", status="pending") == 0
        with worker.engine.begin() as conn:
            conn.execute(text("ALTER TABLE mailout_messages RENAME TO hidden"))
        s, started = scrape_fresh(server, worker.observer)
        # the queue query failed: /metrics still answers
        assert value(s, "mailout_scrape_errors_total") == 1
        assert not [k for k in s if k[0].startswith("mailout_queue_")]
        assert value(s, "mailout_sends_total", outcome="sent", queue="default") == 0
        again = scrape(server)
        if time.monotonic() - started < CACHE_SECONDS:  # not when the machine stalled
            # within the cache second: no second query, no second error
            assert value(again, "mailout_scrape_errors_total") == 1
            observer = worker.observer
            assert isinstance(observer, PrometheusObserver)
            assert observer.queue_collector
            assert observer.queue_collector.queries == 2
        with worker.engine.begin() as conn:
            conn.execute(text("ALTER TABLE hidden RENAME TO mailout_messages"))
        s, _ = scrape_fresh(server, worker.observer)
        assert value(s, "mailout_queue_due_messages", queue="default") == 0
    worker.engine.dispose()


def _credentials_scenario(server_smtp: SmtpTestServer, password: str,
                          checks: list[str]) -> Scenario:
    async def scenario(worker: Worker, server: MetricsServer) -> None:
        def unready() -> bool:
            """/readyz says the transport is paused"""
            status, body = http_get(server.url + "/readyz")
            return status == 503 and "transport paused" in body
        await until(unready)
        assert value(scrape(server), "mailout_transport_paused") == 1
        assert http_get(server.url + "/healthz")[0] == 200  # paused is alive, not stuck
        checks.append("paused")
        server_smtp.auth = (AUTH_USER, password)  # the operator fixed the credentials

        def ready() -> bool:
            """/readyz is ready again and everything was sent"""
            return (http_get(server.url + "/readyz")[0] == 200
                    and len(server_smtp.messages) == 3)
        await until(ready)
        assert value(scrape(server), "mailout_transport_paused") == 0
        checks.append("resumed")
    return scenario


SECRET = "supersecret-XYZ"
BODY = "BODY-7f3a9c-distinctive"
PARAM = "PARAM-51d0e2-distinctive"
RECIPIENTS = ["ann.lee@example.com", "bob.ray@example.net", "cy.dee@example.org"]


def _add_private(engine: Engine, tmp_path: Path) -> Path:
    templates = tmp_path / "templates"
    (templates / "welcome").mkdir(parents=True)
    (templates / "welcome" / "subject.txt").write_text("Welcome")
    (templates / "welcome" / "text.txt").write_text("Your code: {{ code }}")
    add(engine, RECIPIENTS[:2], prefix="private", body=BODY)
    with engine.begin() as conn:
        enqueue(conn, to=RECIPIENTS[2], template="welcome", params={"code": PARAM},
                key="private-tpl", settings=SETTINGS)
    return templates


def _credentials_settings(db_url: str, server: SmtpTestServer, templates: Path) -> Settings:
    return settings_for(db_url, server, SMTP_USER=AUTH_USER, SMTP_PASS=SECRET,
                        MAILOUT_PAUSE_SECONDS=0.2, MAILOUT_PAUSE_CAP_SECONDS=0.4,
                        MAILOUT_TEMPLATES=templates)


def _assert_private(logged: str) -> None:
    assert SECRET not in logged
    assert BODY not in logged
    assert PARAM not in logged
    for address in RECIPIENTS:
        assert address not in logged
    assert "a***@example.com" in logged  # the masked form is what shows


def test_readyz_goes_unready_on_rejected_credentials_and_logs_no_secrets(
    sqlite_url: str, auth_smtp_server: SmtpTestServer, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from mailout import db

    engine = db.make_engine(sqlite_url)
    templates = _add_private(engine, tmp_path)
    caplog.set_level(logging.DEBUG)
    for name in ("mailout", "aiosmtplib", "asyncio", "urllib3"):
        caplog.set_level(logging.DEBUG, logger=name)
    checks: list[str] = []
    run_with_metrics(_credentials_settings(sqlite_url, auth_smtp_server, templates),
                     _credentials_scenario(auth_smtp_server, SECRET, checks))
    assert checks == ["paused", "resumed"]
    # Everything the process logged, extras included, except the test's own SMTP
    # server (aiosmtpd, logger "mail.log"), which plays the provider and echoes the
    # whole conversation. SQL echo (the sqlalchemy loggers) is a separate opt-in that
    # prints parameters, and is off. See mailout.support.logs.
    ours = [r for r in caplog.records if not r.name.startswith("mail.")]
    logged = "\n".join(JsonFormatter().format(r) for r in ours)
    assert "transport paused" in logged
    assert "outcome=paused" in logged
    # Accepted sends are summed up (MAILOUT_LOG_SENDS=summary, the default), not one
    # line each; the last summary is written when the worker stops.
    assert re.search(r"sent [1-9]\d* in \d+\.\ds: default=[1-9]", logged), logged
    assert "outcome=sent" not in logged
    _assert_private(logged)
    engine.dispose()


def test_json_logs_carry_send_fields_and_no_secrets(
    sqlite_url: str, auth_smtp_server: SmtpTestServer, tmp_path: Path,
) -> None:
    from mailout import db

    engine = db.make_engine(sqlite_url)
    templates = _add_private(engine, tmp_path)
    out = io.StringIO()
    root = logging.getLogger()
    saved_level = root.level
    levels = {name: logging.getLogger(name).level for name in ("sqlalchemy", "mail.log")}
    handler = configure_logging("json", logging.DEBUG, stream=out)
    try:
        checks: list[str] = []
        settings = replace(_credentials_settings(sqlite_url, auth_smtp_server, templates),
                           log_sends=LogSends.EACH)  # a line per send, the fields checked here
        run_with_metrics(settings, _credentials_scenario(auth_smtp_server, SECRET, checks))
    finally:
        root.removeHandler(handler)
        root.setLevel(saved_level)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    ours = [e for e in events if not e["logger"].startswith("mail.")]
    _assert_private(json.dumps(ours))
    sent = [e for e in ours if e.get("event") == "send" and e["outcome"] == "sent"]
    assert len(sent) == 3
    for e in sent:
        assert e["queue"] == "default"
        assert e["smtp_code"] == 250
        assert e["stage"] == "body"
        assert e["message_id"].startswith("<")
        assert e["key"].startswith("private")
        assert e["attempt"] == 1
        assert e["duration_ms"] >= 0
        assert "***@" in e["recipient"]
    paused = [e for e in ours if e.get("event") == "send" and e["outcome"] == "paused"]
    assert paused
    assert all(e["smtp_code"] == 535 for e in paused)
    engine.dispose()


class _Hook(BaseHTTPRequestHandler):
    received: list[dict[str, Any]]

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        self.received.append(json.loads(self.rfile.read(length)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []
    handler = type("Hook", (_Hook,), {"received": received})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/alerts", received
    httpd.shutdown()
    httpd.server_close()


def test_the_webhook_receives_the_dead_letter_alert(
    sqlite_url: str, smtp_server: SmtpTestServer,
    webhook: tuple[str, list[dict[str, Any]]],
) -> None:
    from mailout import db

    url, received = webhook
    engine = db.make_engine(sqlite_url)
    (rid,) = add(engine, ["rcpt-451@example.com"])
    settings = settings_for(sqlite_url, smtp_server, MAILOUT_ALERT_WEBHOOK=url,
                            MAILOUT_MAX_ATTEMPTS=1)
    worker = run_until_idle(settings)  # closing the worker's alerts flushes them
    dead = [a for a in received if a["kind"] == "dead"]
    assert len(dead) == 1
    assert dead[0]["details"]["id"] == rid
    assert dead[0]["details"]["reason"] == "max_attempts"
    assert dead[0]["details"]["reply_code"] == 451
    assert dead[0]["text"].startswith("mailout dead:")
    assert worker.alerts.stats == {"delivered": 1, "failed": 0, "dropped": 0}
    engine.dispose()


def _cli_has_metrics() -> bool:
    exe = Path(sys.executable).parent / "mailout"
    out = subprocess.run([str(exe), "worker", "--help"], capture_output=True, text=True,
                         check=False)
    return "--metrics-port" in out.stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_a_worker_process_serves_metrics_and_health(
    sqlite_url: str, smtp_server: SmtpTestServer, tmp_path: Path
) -> None:
    if not _cli_has_metrics():
        pytest.skip("mailout worker has no --metrics-port yet (CLI wiring pending)")
    from mailout import db

    engine = db.make_engine(sqlite_url)
    add(engine, [f"user{i}@example.com" for i in range(5)])
    port = _free_port()
    env = worker_env(sqlite_url, smtp_server, MAILOUT_LOG_FORMAT="json")
    log = tmp_path / "w.log"
    proc = spawn_worker(env, "--metrics-port", str(port), log=log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        body = ""
        while time.monotonic() < deadline:
            try:
                _status, body = http_get(base + "/metrics")
            except OSError:
                time.sleep(0.1)
                continue
            if 'mailout_sends_total{outcome="sent",queue="default"} 5.0' in body:
                break
            time.sleep(0.1)
        assert 'mailout_sends_total{outcome="sent",queue="default"} 5.0' in body, body
        assert http_get(base + "/readyz") == (200, "ready\n")
        assert http_get(base + "/healthz")[0] == 200
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0, log.read_text()[-2000:]
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    # The default MAILOUT_LOG_SENDS=summary: no line per accepted send, and the counts
    # of the summaries (the last one written as the worker stopped) add up to them all.
    assert [e for e in events if e.get("event") == "send"] == []
    summaries = [e for e in events if e.get("event") == "send_summary"]
    assert sum(e["sent"] for e in summaries) == 5
    assert sum(e["queues"]["default"] for e in summaries) == 5
    engine.dispose()
