"""The web console in a real browser: headless Chromium (Debian's), driven by
Selenium, against the real app on a loopback port, a real database (SQLite file
and PostgreSQL) and a real worker process sending to the test SMTP server.

One browser serves the whole module. Screenshots go to tests/artifacts/web/.
"""

from __future__ import annotations

import http.server
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import spawn_worker, worker_env
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from sqlalchemy import Engine, select

from mailout import db
from mailout.db.schema import messages
from mailout.outbox import EnqueueSettings, enqueue
from mailout.transports.smtp.outcome import Stage
from tests.support.webconsole import (
    ADMIN_TOKEN,
    EXAMPLES,
    READONLY_TOKEN,
    chromium,
    log_in,
    navigate,
    png_size,
    screenshot,
    serve_console,
)

ENQUEUE = EnqueueSettings(message_id_domain="shop.example.com", templates_dir=EXAMPLES)
ORDER = {"customer_name": "Alice", "order_id": 1001, "currency": "EUR", "total": 49.0,
         "items": [{"name": "Espresso beans", "quantity": 2, "price": 24.5}]}
ANSI_REPLY = "5.1.1 \x1b[31mmailbox <b>gone</b>\x1b[0m <script>alert(3)</script>"
HOSTILE_SUBJECT = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    driver = chromium()
    yield driver
    driver.quit()


def wait_for(check: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def status_of(engine: Engine, rid: int) -> str:
    with engine.connect() as conn:
        return str(conn.scalar(select(messages.c.status).where(messages.c.id == rid)))


@pytest.fixture
def worker(db_url: str, smtp_server: SmtpTestServer,
           tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real `mailout worker` process, sending to the test SMTP server."""
    env = worker_env(db_url, smtp_server, MAILOUT_TEMPLATES=str(EXAMPLES),
                     MAILOUT_RETRY_BASE_SECONDS="0.2", MAILOUT_LISTEN="false")
    proc = spawn_worker(env, log=tmp_path / "worker.log")
    yield proc
    proc.terminate()
    proc.wait(timeout=30)


def no_alert(driver: WebDriver) -> bool:
    try:
        driver.switch_to.alert  # noqa: B018 - the property raises when there is no alert
    except NoAlertPresentException:
        return True
    return False


def text_of(driver: WebDriver, element_id: str) -> str:
    return str(driver.find_element(By.ID, element_id).text)


@pytest.mark.slow
def test_operator_retries_a_failed_message_and_a_worker_sends_it(
    browser: WebDriver, db_url: str, engine: Engine, smtp_server: SmtpTestServer,
    worker: subprocess.Popen[bytes], request: pytest.FixtureRequest,
) -> None:
    backend = request.node.callspec.params["db_url"]
    smtp_server.fail("broken@example.com", Stage.RCPT, 550, ANSI_REPLY, times=1)
    with engine.begin() as conn:
        ok = [enqueue(conn, to=f"ok{i}@example.com", template="order_confirmation",
                      params=ORDER, key=f"order-{i}", settings=ENQUEUE).id for i in range(3)]
        rid = enqueue(conn, to="broken@example.com", template="order_confirmation",
                      params=ORDER, key="order-broken", settings=ENQUEUE).id
    wait_for(lambda: status_of(engine, rid) == "failed", what="the failure")
    wait_for(lambda: all(status_of(engine, i) == "sent" for i in ok), what="the sends")

    with serve_console(db_url) as console:
        base = console.url
        browser.get(base + "/static/console.css")
        browser.delete_all_cookies()  # cookies ignore ports: forget earlier tests' sessions
        browser.get(base + "/")
        assert browser.find_element(By.ID, "login-form").is_displayed()  # 401 page: log in
        log_in(browser, base, "Tess", ADMIN_TOKEN)
        assert text_of(browser, "identity").startswith("Tess")

        # Overview: counts per queue, charts, transport, pauses, unknown backlog.
        queues = text_of(browser, "queues")
        assert "default" in queues
        assert len(browser.find_elements(By.CSS_SELECTOR, "#activity svg.spark")) == 8
        assert "Sending" in text_of(browser, "transport-state")
        assert browser.find_element(By.ID, "no-pauses").is_displayed()
        assert text_of(browser, "unknown-messages") == "0"
        shot = screenshot(browser, f"{backend}-overview")
        assert png_size(shot)[0] == 1400

        # Filter to failed messages, open the one there.
        navigate(browser, By.LINK_TEXT, "Messages")
        browser.find_element(By.ID, "status-failed").click()
        navigate(browser, By.ID, "apply-filter")
        wait_for(lambda: "status=failed" in browser.current_url, what="the filtered list")
        rows = browser.find_elements(By.CSS_SELECTOR, "#message-list tbody tr")
        assert len(rows) == 1
        assert f"/messages/{rid}" in rows[0].find_element(
            By.CSS_SELECTOR, "a.msg-link").get_attribute("href")
        navigate(browser, By.CSS_SELECTOR, "#message-list a.msg-link")

        # Detail: the attempt timeline and the rendered HTML in its sandbox.
        timeline = text_of(browser, "timeline")
        assert "550" in timeline
        assert "\\x1b[31m" in timeline  # the escape is shown, not interpreted
        frame = browser.find_element(By.ID, "mail-html")
        assert frame.get_attribute("sandbox") == ""
        browser.switch_to.frame(frame)
        assert "Thank you for your order" in browser.find_element(By.TAG_NAME, "body").text
        browser.switch_to.default_content()
        assert "Your order #1001 is confirmed" in text_of(browser, "mail-subject")
        assert "Hello Alice" in browser.find_element(By.ID, "mail-text").get_attribute(
            "textContent")
        shot = screenshot(browser, f"{backend}-message")
        assert png_size(shot)[1] > 1000  # the whole page, down to the rendered mail

        # Retry, confirm with a reason.
        navigate(browser, By.ID, "act-retry")
        assert text_of(browser, "confirm-count") == "1"
        browser.find_element(By.ID, "reason").send_keys("mailbox restored")
        navigate(browser, By.ID, "confirm-submit")
        assert "Retry: changed 1" in text_of(browser, "flash")

        # The worker sends it: the status changes on reload.
        def shows_sent() -> bool:
            browser.refresh()
            return "sent" in browser.find_element(By.TAG_NAME, "h1").text
        wait_for(shows_sent, what="the status to show sent")
        assert any(m.rcpt_tos == ("broken@example.com",) for m in smtp_server.messages)
        assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline tr.attempt")) == 2
        screenshot(browser, f"{backend}-message-after-retry")

        # The audit entry, on the message and in the log.
        history = text_of(browser, "history")
        assert "Tess (web, admin)" in history
        assert "mailbox restored" in history
        navigate(browser, By.LINK_TEXT, "Audit log")
        entry = browser.find_elements(By.CSS_SELECTOR, "#audit-log tr.audit-entry")[0].text
        assert "Tess (web, admin)" in entry
        assert "retry" in entry
        assert f"message {rid}" in entry
        assert no_alert(browser)


class Beacon:
    """A loopback HTTP server that counts requests: a remote image's "open" ping."""

    def __init__(self) -> None:
        hits: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "image/gif")
                self.end_headers()
                self.wfile.write(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;")

            def log_message(self, *args: object) -> None:
                pass

        self.hits = hits
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_hostile_content_stays_inert_text(
    browser: WebDriver, db_url: str, engine: Engine, smtp_server: SmtpTestServer,
    tmp_path: Path,
) -> None:
    beacon = Beacon()
    smtp_server.fail("victim@example.com", Stage.RCPT, 550, ANSI_REPLY)
    html = (f"<p>Hi</p><script>document.title='pwned';alert(2)</script>"
            f"<img id='pixel' src='{beacon.url}/open.gif' alt='pixel'>")
    with engine.begin() as conn:
        rid = enqueue(conn, to="victim@example.com", subject=HOSTILE_SUBJECT, text="plain",
                      html=html, key="<b>key</b>", settings=ENQUEUE).id
    env = worker_env(db_url, smtp_server, MAILOUT_LISTEN="false")
    proc = spawn_worker(env, "--until-idle", log=tmp_path / "worker.log")
    assert proc.wait(timeout=60) == 5  # the 550 failed it: exit 5
    assert status_of(engine, rid) == "failed"
    try:
        with serve_console(db_url) as console:
            log_in(browser, console.url, "Tess", ADMIN_TOKEN)
            browser.get(console.url + "/messages")
            cell = browser.find_element(By.CSS_SELECTOR, "#message-list td.subject").text
            assert cell == f"“{HOSTILE_SUBJECT}”"
            assert "\\x1b[31m" in browser.find_element(By.CSS_SELECTOR, "td.reply").text
            assert browser.find_elements(By.TAG_NAME, "script") == []
            assert no_alert(browser)

            browser.get(f"{console.url}/messages/{rid}")
            assert no_alert(browser)
            assert browser.find_elements(By.TAG_NAME, "script") == []
            assert browser.find_elements(By.TAG_NAME, "b") == []  # markup in data is text
            assert "<script>alert(3)</script>" in text_of(browser, "timeline")
            assert "<b>key</b>" in text_of(browser, "fields")
            assert HOSTILE_SUBJECT in text_of(browser, "mail-subject")
            frame = browser.find_element(By.ID, "mail-html")
            browser.switch_to.frame(frame)
            assert browser.title != "pwned"  # the mail's script did not run
            browser.switch_to.default_content()
            assert beacon.hits == []  # remote loads are blocked by default

            navigate(browser, By.ID, "remote-toggle")  # load remote images
            wait_for(lambda: beacon.hits, timeout=10, what="the remote image")
            assert no_alert(browser)
            assert browser.find_elements(By.TAG_NAME, "script") == []
    finally:
        beacon.close()


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_read_only_role_sees_masked_data_and_cannot_act(
    browser: WebDriver, db_url: str, engine: Engine,
) -> None:
    with engine.begin() as conn:
        rid = enqueue(conn, to="carol@example.com", template="order_confirmation",
                      params=ORDER, key="order-ro", settings=ENQUEUE).id
    with serve_console(db_url) as console:
        log_in(browser, console.url, "Rita", READONLY_TOKEN)
        assert "read-only" in text_of(browser, "identity").lower()
        assert browser.find_elements(By.CSS_SELECTOR, "#pauses form") == []
        browser.get(console.url + "/messages")
        assert browser.find_elements(By.ID, "bulk") == []
        assert "c***@example.com" in text_of(browser, "message-list")
        assert "carol@example.com" not in browser.page_source
        browser.get(f"{console.url}/messages/{rid}")
        assert browser.find_elements(By.ID, "actions") == []
        assert browser.find_element(By.ID, "mail-withheld").is_displayed()
        browser.get(f"{console.url}/confirm?action=cancel&id={rid}")
        assert "read-only" in text_of(browser, "problem")
    with db.make_engine(db_url).connect() as conn:
        assert conn.scalar(select(messages.c.status).where(messages.c.id == rid)) == "pending"
