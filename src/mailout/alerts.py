"""Alert hooks: a Python callback and an optional webhook, off the sending path.

Alerts go through a queue drained by one background thread, so a slow or failing
webhook delays only other alerts, never a send.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger("mailout.alerts")

WEBHOOK_TIMEOUT = 5.0
WEBHOOK_TRIES = 3


@dataclass(frozen=True, slots=True)
class Alert:
    """Something an operator must hear about."""

    kind: str  # "dead", "paused" or "resumed"
    summary: str
    details: dict[str, Any] = field(default_factory=dict)  # ids and reasons, never bodies
    at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())


AlertCallback = Callable[[Alert], None]


class Alerts:
    """Delivers alerts to ``callback`` and ``webhook_url`` in a background thread."""

    def __init__(self, callback: AlertCallback | None = None, webhook_url: str | None = None):
        self._callback = callback
        self._webhook_url = webhook_url
        self._queue: queue.Queue[Alert | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    def fire(self, alert: Alert) -> None:
        """Queue ``alert`` and return at once. Dead letters are also logged at ERROR."""
        level = logging.ERROR if alert.kind in ("dead", "paused") else logging.WARNING
        log.log(level, "alert %s: %s %s", alert.kind, alert.summary, alert.details)
        if self._callback is None and self._webhook_url is None:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._drain, name="mailout-alerts", daemon=True)
            self._thread.start()
        self._queue.put(alert)

    def close(self, timeout: float = WEBHOOK_TIMEOUT * WEBHOOK_TRIES) -> None:
        """Deliver what is queued, waiting at most ``timeout`` seconds."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            self._thread = None

    def _drain(self) -> None:
        while (alert := self._queue.get()) is not None:
            if self._callback is not None:
                try:
                    self._callback(alert)
                except Exception:
                    log.exception("alert callback failed for %s", alert.kind)
            if self._webhook_url is not None:
                self._post(alert)

    def _post(self, alert: Alert) -> None:
        body = json.dumps(asdict(alert)).encode()
        assert self._webhook_url is not None
        for attempt in range(1, WEBHOOK_TRIES + 1):
            req = urllib.request.Request(  # noqa: S310 - the operator configures this URL
                self._webhook_url,
                data=body,
                headers={"Content-Type": "application/json", "User-Agent": "mailout"},
                method="POST",
            )
            try:
                with urllib.request.urlopen(req, timeout=WEBHOOK_TIMEOUT) as resp:  # noqa: S310 - as above
                    if resp.status < 300:
                        return
            except OSError as exc:
                log.warning("alert webhook attempt %d failed: %s", attempt, exc)
            time.sleep(0.5 * attempt)
        log.error("alert webhook gave up on a %s alert after %d tries", alert.kind, WEBHOOK_TRIES)
