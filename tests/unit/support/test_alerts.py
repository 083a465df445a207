"""Alert delivery: validation, bounded queue, failures counted, nothing secret logged."""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest

from mailout.exceptions import ConfigError
from mailout.support.alerts import Alert, Alerts


@pytest.mark.parametrize("url", ["file:///etc/passwd", "hooks.example.com/x", "ftp://h/x",
                                 "http://"])
def test_the_webhook_must_be_an_http_url(url: str) -> None:
    with pytest.raises(ConfigError, match="MAILOUT_ALERT_WEBHOOK"):
        Alerts(webhook_url=url)


def test_a_full_queue_drops_alerts_instead_of_growing() -> None:
    entered, release = threading.Event(), threading.Event()
    got: list[str] = []

    def slow(alert: Alert) -> None:
        entered.set()
        release.wait(5)
        got.append(alert.summary)

    alerts = Alerts(slow, max_queued=1)
    alerts.fire(Alert("dead", "one"))
    assert entered.wait(5)  # the thread holds "one"; the queue is empty again
    alerts.fire(Alert("dead", "two"))  # queued
    alerts.fire(Alert("dead", "three"))  # no room: dropped
    release.set()
    alerts.close()
    assert got == ["one", "two"]
    assert alerts.stats == {"delivered": 2, "failed": 0, "dropped": 1}


def test_failures_are_counted_and_the_thread_carries_on(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/hook?token=SECRET-TOKEN"
    calls: list[str] = []

    def callback(alert: Alert) -> None:
        calls.append(alert.kind)
        if alert.kind == "dead":
            raise RuntimeError("callback bug")

    alerts = Alerts(callback, url, tries=2, timeout=1)
    t0 = time.monotonic()
    with caplog.at_level(logging.DEBUG, logger="mailout.support.alerts"):
        alerts.fire(Alert("dead", "message 1 is dead", {"reply_text": "550 <ann@example.com>"}))
        alerts.fire(Alert("resumed", "sending resumed"))
        alerts.close()
    assert time.monotonic() - t0 < 5  # one 0.5 s pause between tries, none after the last
    assert calls == ["dead", "resumed"]
    assert alerts.stats == {"delivered": 0, "failed": 2, "dropped": 0}
    assert "SECRET-TOKEN" not in caplog.text  # the URL may carry a token: never logged
    assert "ann@example.com" not in caplog.text
    assert "a***@example.com" in caplog.text
    assert "gave up on a dead alert after 2 tries" in caplog.text


def test_without_hooks_alerts_are_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    alerts = Alerts()
    with caplog.at_level(logging.WARNING, logger="mailout.support.alerts"):
        alerts.fire(Alert("paused", "sending paused: bad_credentials"))
    alerts.close()
    assert caplog.records[0].levelno == logging.ERROR
    assert alerts.stats == {"delivered": 0, "failed": 0, "dropped": 0}
