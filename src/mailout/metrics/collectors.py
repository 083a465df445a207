"""Metrics read at scrape time: queue depth from the database, alert deliveries.

Registered by :meth:`mailout.metrics.prometheus.PrometheusObserver.bind`; see that module.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy import Engine

from mailout.db import stats
from mailout.models import Status
from mailout.support.alerts import Alerts

log = logging.getLogger(__name__)

CACHE_SECONDS = 1.0  # a scrape result is reused this long: scrapes cannot hammer the DB
LOCK_WAIT_SECONDS = 2.0
STATEMENT_TIMEOUT_MS = 5000
LIVE_STATUSES = (Status.PENDING, Status.SENDING)


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """One reading of the live queues: what the queue gauges show."""

    counts: Mapping[str, Mapping[str, float]]  # queue -> pending, sending, due
    ages: Mapping[str, float]  # queue -> seconds the oldest due row has waited
    queues: Sequence[str]  # every queue to report, 0 when empty

    def count(self, queue: str, what: str) -> float:
        return self.counts.get(queue, {}).get(what, 0)

    def age(self, queue: str) -> float:
        return self.ages.get(queue, 0.0)

class QueueCollector:
    """Queue depth and the age of the oldest due message, read at scrape time.

    Only live rows are counted, through the partial indexes the claim query uses
    (``pending``: ix_mailout_messages_due, ``sending``: ix_mailout_messages_leased), so
    the cost follows the backlog, not the table. Finished rows (sent, failed, dead,
    cancelled) and ``unknown`` have no index on status: counting them would read the
    whole table on every scrape of every worker. ``mailout status`` shows them, and
    ``mailout_sends_total`` gives their rates.
    """

    def __init__(self, engine: Engine, queues: Iterable[str],
                 cache_seconds: float = CACHE_SECONDS) -> None:
        self._engine = engine
        self._queues = set(queues)  # always reported (0 when empty); grows as queues appear
        self.errors = 0  # failed queue queries: mailout_scrape_errors_total
        self._cache_seconds = cache_seconds
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._cached: QueueSnapshot | None = None  # None: the last query failed
        self.queries = 0  # database round trips made, for tests and curiosity

    def describe(self) -> list[Metric]:
        # No query here.
        return [*self._families(QueueSnapshot({}, {}, ())), self._error_family()]

    def collect(self) -> list[Metric]:
        found = self.snapshot()
        return [*([] if found is None else self._families(found)), self._error_family()]

    def snapshot(self) -> QueueSnapshot | None:
        """The queues now (or up to ``cache_seconds`` ago); None if the query failed."""
        # Concurrent scrapes share one query; behind a slow one, they serve the last result.
        if self._lock.acquire(timeout=LOCK_WAIT_SECONDS):
            try:
                if time.monotonic() - self._at >= self._cache_seconds:
                    self._cached = self._scrape()
                    self._at = time.monotonic()
            finally:
                self._lock.release()
        return self._cached

    def _error_family(self) -> Metric:
        family = CounterMetricFamily("mailout_scrape_errors",
                                     "Scrapes whose queue query failed (queue series omitted).")
        family.add_metric([], self.errors)
        return family

    def _scrape(self) -> QueueSnapshot | None:
        self.queries += 1
        try:
            with self._engine.connect() as conn:
                depths = stats.queue_depths(conn, statement_timeout_ms=STATEMENT_TIMEOUT_MS)
        except Exception as exc:  # any failure: omit the queue series, keep /metrics up
            self.errors += 1
            log.warning("metrics: queue query failed, queue series omitted: %s",
                        type(exc).__name__,
                        extra={"event": "metrics_queue_query_failed", "error": type(exc).__name__})
            return None
        counts: dict[str, dict[str, float]] = {}
        ages: dict[str, float] = {}
        now = depths.now
        for queue, n, due, oldest in depths.pending:
            counts.setdefault(queue, {})["pending"] = n
            counts[queue]["due"] = due
            ages[queue] = max(0.0, (now - oldest).total_seconds()) if oldest and now >= oldest \
                else 0.0
        for queue, n in depths.sending:
            counts.setdefault(queue, {})["sending"] = n
        self._queues |= set(counts)
        return QueueSnapshot(counts, ages, tuple(sorted(self._queues)))

    @staticmethod
    def _families(found: QueueSnapshot) -> list[Metric]:
        depth = GaugeMetricFamily("mailout_queue_messages",
                                  "Live messages by queue and status (pending, sending).",
                                  labels=["queue", "status"])
        due = GaugeMetricFamily("mailout_queue_due_messages",
                                "Pending messages whose next attempt time has come.",
                                labels=["queue"])
        oldest = GaugeMetricFamily("mailout_queue_oldest_due_age_seconds",
                                   "How long the oldest due pending message has waited "
                                   "past its next attempt time (0 if none is due).",
                                   labels=["queue"])
        for queue in found.queues:
            for status in LIVE_STATUSES:
                depth.add_metric([queue, status.value], found.count(queue, status.value))
            due.add_metric([queue], found.count(queue, "due"))
            oldest.add_metric([queue], found.age(queue))
        return [depth, due, oldest]


class AlertCollector:
    """Alert deliveries (webhook and callback) by result, read from the worker's Alerts."""

    def __init__(self, alerts: Alerts) -> None:
        self._alerts = alerts

    def describe(self) -> list[Metric]:
        return [CounterMetricFamily("mailout_alert_deliveries", "", labels=["result"])]

    def collect(self) -> list[Metric]:
        family = CounterMetricFamily(
            "mailout_alert_deliveries",
            "Alerts by delivery result: delivered, failed (after retries), dropped (queue "
            "full).", labels=["result"])
        stats = self._alerts.stats
        for result in ("delivered", "failed", "dropped"):
            family.add_metric([result], stats.get(result, 0))
        return [family]
