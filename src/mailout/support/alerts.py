"""Alert hooks: a Python callback and an optional webhook, off the sending path.

Alerts go through a bounded queue drained by one background thread, so a slow or
failing webhook delays only other alerts, never a send. Each alert is also logged
(addresses masked), so nothing is lost when the webhook is down. The webhook gets a
JSON POST: ``{"kind", "summary", "details", "at", "text"}`` (``text`` repeats the
summary for chat webhooks that only show that field); see docs/observability.md.

Only a 2xx answer counts as delivered: a redirect is a failure (following it would
re-send the alert as a body-less GET, possibly to another host), and each POST has
one deadline for connecting, sending and reading the answer, so a server that
answers a byte at a time cannot hold the alert thread.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from mailout.exceptions import ConfigError
from mailout.support.logs import LogRecipients, redact_addresses

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT = 5.0  # the whole POST: connect, send, status and answer
MAX_ANSWER = 64 * 1024  # read (and ignore) at most this much of the answer
WEBHOOK_TRIES = 3
MAX_QUEUED = 1000  # beyond this, alerts are only logged: a storm must not grow memory


@dataclass(frozen=True, slots=True)
class Alert:
    """Something an operator must hear about."""

    kind: str  # "dead", "paused", "resumed" or "held"
    summary: str
    details: dict[str, Any] = field(default_factory=dict)  # ids and reasons, never bodies
    at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())


AlertCallback = Callable[[Alert], None]


class Alerts:
    """Delivers alerts to ``callback`` and ``webhook_url`` in a background thread.

    ``stats`` counts deliveries: ``delivered``, ``failed`` (the callback raised, or
    the webhook failed every try) and ``dropped`` (the queue was full).
    """

    def __init__(self, callback: AlertCallback | None = None, webhook_url: str | None = None,
                 *, log_recipients: LogRecipients = LogRecipients.MASKED,
                 max_queued: int = MAX_QUEUED, tries: int = WEBHOOK_TRIES,
                 timeout: float = WEBHOOK_TIMEOUT) -> None:
        if webhook_url is not None:
            parts = urlsplit(webhook_url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigError("MAILOUT_ALERT_WEBHOOK",
                                  "must be an http:// or https:// URL")
        self._callback = callback
        self._webhook_url = webhook_url
        self._log_recipients = log_recipients
        self._tries = tries
        self._timeout = timeout
        self._queue: queue.Queue[Alert | None] = queue.Queue(max_queued)
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.stats = {"delivered": 0, "failed": 0, "dropped": 0}

    def fire(self, alert: Alert) -> None:
        """Log ``alert`` and queue it for delivery; return at once, never raise."""
        level = logging.ERROR if alert.kind in ("dead", "paused", "held") else logging.WARNING
        log.log(level, "alert %s: %s %s", alert.kind,
                redact_addresses(alert.summary, self._log_recipients),
                redact_addresses(str(alert.details), self._log_recipients),
                extra={"event": "alert", "alert_kind": alert.kind})
        if self._callback is None and self._webhook_url is None:
            return
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._drain, name="mailout-alerts",
                                                daemon=True)
                self._thread.start()
        try:
            self._queue.put_nowait(alert)
        except queue.Full:
            self.stats["dropped"] += 1
            if self.stats["dropped"] == 1 or self.stats["dropped"] % 100 == 0:
                log.error("alert queue full: %d alerts dropped so far (they are logged above)",
                          self.stats["dropped"],
                          extra={"event": "alerts_dropped", "count": self.stats["dropped"]})

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is queued, waiting at most ``timeout`` seconds (default: one
        alert's worth of webhook tries); what is left is abandoned (it was logged)."""
        with self._start_lock:
            thread, self._thread = self._thread, None
        if thread is None:
            return
        if timeout is None:
            timeout = self._timeout * self._tries + self._tries
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        thread.join(timeout)

    def _drain(self) -> None:
        while (alert := self._queue.get()) is not None:
            ok = True
            if self._callback is not None:
                try:
                    self._callback(alert)
                except Exception:
                    ok = False
                    log.exception("alert callback failed for %s", alert.kind,
                                  extra={"event": "alert_callback_failed",
                                         "alert_kind": alert.kind})
            if self._webhook_url is not None:
                try:
                    ok = self._post(alert) and ok
                except Exception:  # a bug here must not stop the thread: later alerts wait
                    ok = False
                    log.exception("alert webhook crashed on a %s alert", alert.kind,
                                  extra={"event": "alert_webhook_crashed",
                                         "alert_kind": alert.kind})
            self.stats["delivered" if ok else "failed"] += 1

    def _post(self, alert: Alert) -> bool:
        payload = {**asdict(alert), "text": f"mailout {alert.kind}: {alert.summary}"}
        body = json.dumps(payload, default=str).encode()
        assert self._webhook_url is not None
        for attempt in range(1, self._tries + 1):
            problem = _post_once(self._webhook_url, body, self._timeout)
            if problem is None:
                return True
            log.warning("alert webhook attempt %d/%d failed: %s", attempt, self._tries, problem,
                        extra={"event": "alert_webhook_failed", "alert_kind": alert.kind,
                               "try": attempt})
            if attempt < self._tries:
                time.sleep(0.5 * attempt)
        log.error("alert webhook gave up on a %s alert after %d tries", alert.kind, self._tries,
                  extra={"event": "alert_webhook_gave_up", "alert_kind": alert.kind,
                         "tries": self._tries})
        return False


def _post_once(url: str, body: bytes, deadline: float) -> str | None:
    """POST ``body`` to ``url`` within ``deadline`` seconds in all; None when the
    answer is 2xx, else what went wrong (never the URL: it may hold a token)."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=deadline,
                                           context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=deadline)
    # The socket timeout bounds each read only; this bounds the whole exchange. The
    # socket is kept here: a closing answer (HTTP/1.0, Connection: close) detaches it
    # from ``conn`` once the head is read, and the body is read from it after that.
    expired = threading.Event()
    sockets: list[socket.socket] = []
    timer = threading.Timer(deadline, _cut, (sockets, expired))
    timer.start()
    try:
        conn.connect()
        sockets.append(conn.sock)
        if expired.is_set():  # the deadline passed while connecting
            raise TimeoutError
        conn.request("POST", target, body=body,
                     headers={"Content-Type": "application/json", "User-Agent": "mailout"})
        response = conn.getresponse()
        response.read(MAX_ANSWER)
        if expired.is_set():  # the read ended because the deadline cut it short
            raise TimeoutError
        status = response.status
    except (OSError, http.client.HTTPException) as exc:
        if expired.is_set() or isinstance(exc, TimeoutError):
            return f"no complete answer within {deadline:g}s"
        return str(getattr(exc, "strerror", None) or type(exc).__name__)
    finally:
        timer.cancel()
        conn.close()
    if 200 <= status < 300:
        return None
    if 300 <= status < 400:
        return f"HTTP {status}: redirects are not followed (point the webhook at the final URL)"
    return f"HTTP {status}"


def _cut(sockets: list[socket.socket], expired: threading.Event) -> None:
    """End an exchange that ran past its deadline: the blocked read then fails."""
    expired.set()
    for sock in sockets:
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)
