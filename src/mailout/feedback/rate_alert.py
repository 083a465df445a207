"""The bounce and complaint rate alert, and the alert for bounces that blame our sender.

A verified bounce whose reason is sender-side (``sender_rejected``: the receiving
server refused our envelope sender or its domain) suppresses nobody: the fault is our
configuration. :func:`sender_rejected_alert` turns such bounces into one
``sender_rejected`` alert per ingestion, fired by the webhook receiver and by
``mailout bounces ingest``.

Over ``MAILOUT_EVENT_RATE_WINDOW`` (default 24 h), bounces (hard and soft) and
complaints are divided by the messages sent in the same window. Once at least
``MAILOUT_EVENT_RATE_MIN_SENT`` messages were sent, a rate above
``MAILOUT_BOUNCE_RATE_ALERT`` (default 5 %) or ``MAILOUT_COMPLAINT_RATE_ALERT``
(default 0.1 %) fires an alert (``bounce_rate`` / ``complaint_rate``) through the
usual alert hooks; when it falls back below, a ``..._ok`` alert follows. The check
runs after ingestion, at most once a minute per process; it fires on the crossing,
not on every check.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from mailout.db import delivery_events
from mailout.support.alerts import Alert, Alerts

log = logging.getLogger(__name__)

CHECK_EVERY_SECONDS = 60.0


def sender_rejected_alert(count: int, source: str) -> Alert | None:
    """The ``sender_rejected`` alert for ``count`` such bounces just ingested, or None."""
    if count <= 0:
        return None
    return Alert("sender_rejected",
                 f"{count} bounce(s) from {source} say our envelope sender or its domain was "
                 "refused (5.1.7/5.1.8, 'sender rejected'): check MAIL_FROM, "
                 "MAILOUT_RETURN_PATH and the domain's DNS; no address was suppressed",
                 {"bounces": count, "source": source})


class RateLimits(Protocol):
    """The limits the monitor judges by. The webhook receivers' settings
    (:class:`mailout.webhooks.settings.WebhookSettings`) read them from the environment."""

    @property
    def rate_window(self) -> float: ...  # seconds counted back from now
    @property
    def rate_min_sent(self) -> int: ...  # fewer messages sent in the window: no verdict
    @property
    def bounce_rate_alert(self) -> float | None: ...  # None: no bounce rate alert
    @property
    def complaint_rate_alert(self) -> float | None: ...  # None: no complaint rate alert


@dataclass(frozen=True, slots=True)
class Rates:
    """Sent messages, bounces and complaints in the window, and the two rates."""

    window_seconds: float
    sent: int
    bounced: int
    complained: int

    @property
    def bounce_rate(self) -> float:
        return self.bounced / self.sent if self.sent else 0.0

    @property
    def complaint_rate(self) -> float:
        return self.complained / self.sent if self.sent else 0.0


class RateMonitor:
    """Fires rate alerts on crossings; thread-safe."""

    def __init__(self, engine: Engine, settings: RateLimits, alerts: Alerts,
                 every: float = CHECK_EVERY_SECONDS) -> None:
        self._engine = engine
        self._settings = settings
        self.alerts = alerts
        self._every = every
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        self.firing: set[str] = set()

    def maybe_check(self) -> None:
        """Check unless a check ran within the last minute (or another thread is at it)."""
        if time.monotonic() - self._checked_at < self._every:
            return
        if not self._lock.acquire(blocking=False):
            return
        try:
            self._checked_at = time.monotonic()
            self.check()
        except SQLAlchemyError as exc:
            log.warning("rate check failed (%s)", type(exc).__name__,
                        extra={"event": "rate_check_failed", "error": type(exc).__name__})
        finally:
            self._lock.release()

    def check(self) -> Rates:
        """Read the rates now and fire or clear the alerts."""
        s = self._settings
        with self._engine.connect() as conn:
            sent, bounced, complained = delivery_events.rates(conn, s.rate_window)
        rates = Rates(s.rate_window, sent, bounced, complained)
        enough = sent >= s.rate_min_sent
        self._judge("bounce_rate", rates.bounce_rate, s.bounce_rate_alert, enough, rates)
        self._judge("complaint_rate", rates.complaint_rate, s.complaint_rate_alert, enough,
                    rates)
        return rates

    def _judge(self, kind: str, rate: float, limit: float | None, enough: bool,
               rates: Rates) -> None:
        if limit is None:
            return
        details = {"rate": round(rate, 6), "threshold": limit, "sent": rates.sent,
                   "bounced": rates.bounced, "complained": rates.complained,
                   "window_seconds": rates.window_seconds}
        noun = kind.replace("_", " ")
        if enough and rate > limit and kind not in self.firing:
            self.firing.add(kind)
            self.alerts.fire(Alert(kind, f"{noun} {rate:.2%} is above {limit:.2%} over the "
                                    f"last {rates.window_seconds / 3600:g} h", details))
        elif kind in self.firing and (rate <= limit or not enough):
            self.firing.discard(kind)
            self.alerts.fire(Alert(f"{kind}_ok", f"{noun} {rate:.2%} is back under "
                                    f"{limit:.2%}", details))
