"""Prometheus metrics for one worker, and its health, served on ``--metrics-port``.

:class:`PrometheusObserver` implements :class:`mailout.metrics.observer.Observer`: it counts
sends by outcome, times attempts and end-to-end delivery, and remembers what the
health endpoints need (last loop tick, database reachability, transport pause).
Queue depth comes from the database at scrape time (:class:`QueueCollector`), from
the partial indexes over live rows, cached for a second. Each observer has its own
``CollectorRegistry``, so several workers can share one process (as tests do).

Wiring::

    observer = PrometheusObserver()
    worker = build_worker(settings, observer=observer)
    server = start_metrics_server(port, worker)   # /metrics, /healthz, /readyz
    try:
        asyncio.run(worker.run())
    finally:
        server.close()

See docs/observability.md for every metric, the alert rules and the dashboard.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.exposition import choose_encoder

from mailout import __version__
from mailout.exceptions import ConfigError
from mailout.metrics.collectors import CACHE_SECONDS, AlertCollector, QueueCollector
from mailout.metrics.observer import NullObserver, WorkerView, members
from mailout.models import ClaimedMessage, Completion, Outcome

log = logging.getLogger(__name__)

ATTEMPT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
                   4 * 3600.0, 86400.0)
LIVE_POLLS = 10  # /healthz fails when the loop has not ticked for this many poll intervals
LIVE_MIN_SECONDS = 10.0

# Every metric name a scrape can show (without the _total/_bucket/... suffixes);
# tests check the shipped dashboard and alert rules against it.
METRIC_NAMES = frozenset({
    "mailout_sends", "mailout_attempt_duration_seconds", "mailout_delivery_latency_seconds",
    "mailout_transport_paused", "mailout_transport_outage",
    "mailout_transport_outage_seconds", "mailout_transport_member_state",
    "mailout_lease_reclaims", "mailout_database_up",
    "mailout_worker_last_tick_timestamp_seconds", "mailout_worker", "mailout_scrape_errors",
    "mailout_queue_messages", "mailout_queue_due_messages",
    "mailout_queue_oldest_due_age_seconds", "mailout_alert_deliveries",
})


DEFAULT_DB_RETRY_GRACE = 30.0  # the worker's backoff cap between database retries


class PrometheusObserver:
    """Metrics and health state of one worker; see the module docstring."""

    def __init__(self, registry: CollectorRegistry | None = None, *,
                 cache_seconds: float = CACHE_SECONDS, live_after: float | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.cache_seconds = cache_seconds
        self.live_after = live_after  # None: from the worker's poll interval, at bind()
        r = self.registry
        self.sends = Counter("mailout_sends", "Send attempts by outcome.",
                             ["queue", "outcome"], registry=r)
        self.transport_sends = Counter(
            "mailout_transport_sends", "Send attempts by the transport (or failover member) "
            "they went through, and outcome.", ["transport", "outcome"], registry=r)
        self.attempt_seconds = Histogram(
            "mailout_attempt_duration_seconds", "Claim to outcome of one attempt.",
            ["queue"], buckets=ATTEMPT_BUCKETS, registry=r)
        self.latency = Histogram(
            "mailout_delivery_latency_seconds",
            "Enqueue to acceptance by the SMTP server (sent messages only).",
            ["queue"], buckets=LATENCY_BUCKETS, registry=r)
        self.reclaims = Counter("mailout_lease_reclaims",
                                "Rows claimed after another worker's lease ran out.",
                                ["queue"], registry=r)
        self.info = Info("mailout_worker", "The worker process.", registry=r)
        Gauge("mailout_transport_paused", "1 while sending is paused after a configuration "
              "error (bad credentials, broken TLS).", registry=r).set_function(
            lambda: float(self.transport_paused))
        self.outage_gauge = Gauge(
            "mailout_transport_outage", "1 while the provider is unreachable or refuses every "
            "message (label: why); 0 otherwise.", ["reason"], registry=r)
        self.outage_gauge.labels("").set(0)
        Gauge("mailout_transport_outage_seconds", "How long the current transport outage has "
              "lasted; 0 when there is none.", registry=r).set_function(self._outage_seconds)
        self.member_gauge = Gauge(
            "mailout_transport_member_state", "1 for the state a failover or roundrobin "
            "member is in (state: up or down; reason: why it is down).",
            ["transport", "member", "state", "reason"], registry=r)
        self._member_labels: dict[tuple[str, str], tuple[str, str, str, str]] = {}
        Gauge("mailout_database_up", "1 if the worker's last database call succeeded.",
              registry=r).set_function(lambda: float(bool(self.database_ok)))
        Gauge("mailout_worker_last_tick_timestamp_seconds",
              "Unix time of the last claim-loop iteration.", registry=r).set_function(
            lambda: self._last_tick_wall)
        # Health state, written on the event loop and read by the HTTP threads: each is
        # one attribute assignment, atomic under the GIL.
        self.transport_paused = False
        self.paused_reason: str | None = None
        self.outage_since: float | None = None  # time.monotonic() when it started
        self.database_ok: bool | None = None
        self._last_tick: float | None = None  # time.monotonic()
        self._last_tick_wall = 0.0
        self._created = time.monotonic()
        self._worker: WorkerView | None = None
        self.queue_collector: QueueCollector | None = None  # set by bind()
        self._failed_once = False
        # How long the claim loop may wait between database retries; the bound worker's.
        self.db_retry_grace = DEFAULT_DB_RETRY_GRACE

    # -- Observer ----------------------------------------------------------------

    def attempt(self, msg: ClaimedMessage, completion: Completion, seconds: float) -> None:
        if not completion.logged:
            return  # nothing was attempted (a row parked or held at claim)
        try:
            self.sends.labels(msg.queue, completion.outcome.value).inc()
            if completion.transport is not None:
                self.transport_sends.labels(completion.transport,
                                            completion.outcome.value).inc()
            self.attempt_seconds.labels(msg.queue).observe(seconds)
            if completion.outcome is Outcome.SENT:
                # Both ends on the database clock; the send itself on this process's.
                waited = (msg.claimed_at - msg.created_at).total_seconds() + seconds
                self.latency.labels(msg.queue).observe(max(0.0, waited))
        except Exception:  # a metrics bug must never keep an attempt from being recorded
            if not self._failed_once:
                self._failed_once = True
                log.exception("metrics: could not record an attempt",
                              extra={"event": "metrics_record_failed", "outbox_id": msg.id})

    def reclaimed(self, msg: ClaimedMessage) -> None:
        self.reclaims.labels(msg.queue).inc()

    def paused(self, reason: str | None) -> None:
        self.transport_paused = reason is not None
        self.paused_reason = reason

    def outage(self, reason: str | None) -> None:
        self.outage_gauge.clear()
        self.outage_gauge.labels(reason or "").set(0 if reason is None else 1)
        self.outage_since = None if reason is None else time.monotonic()

    def member(self, transport: str, member: str, state: str, reason: str | None) -> None:
        # One series per member: the one for its previous state (or reason) goes.
        labels = (transport, member, state, reason or "")
        previous = self._member_labels.get((transport, member))
        if previous is not None and previous != labels:
            self.member_gauge.remove(*previous)
        self._member_labels[(transport, member)] = labels
        self.member_gauge.labels(*labels).set(1)

    def _outage_seconds(self) -> float:
        since = self.outage_since
        return 0.0 if since is None else time.monotonic() - since

    def tick(self) -> None:
        self._last_tick = time.monotonic()
        self._last_tick_wall = time.time()

    def database(self, reachable: bool) -> None:
        self.database_ok = reachable

    # -- wiring ------------------------------------------------------------------

    def bind(self, worker: WorkerView) -> None:
        """Add what needs the built worker: queue metrics from its database, its info."""
        if self._worker is not None:
            raise RuntimeError("this observer is already bound to a worker")
        self._worker = worker
        self.db_retry_grace = worker.db_retry_cap
        if self.live_after is None:
            self.live_after = max(LIVE_POLLS * worker.poll_seconds, LIVE_MIN_SECONDS)
        lanes = list(worker.lane_specs)
        self.info.info({
            "version": __version__, "worker": worker.name,
            "lanes": ",".join(f"{ln.name}({'+'.join(ln.queues) or '*'}):{ln.concurrency}"
                              for ln in lanes),
        })
        queues = {q for ln in lanes for q in ln.queues}
        if any(not ln.queues for ln in lanes):
            queues.add("default")
        # Series exist from the start at 0, so increase() sees the first dead letter.
        for queue in sorted(queues):
            for outcome in Outcome:
                self.sends.labels(queue, outcome.value)
            self.reclaims.labels(queue)
        self.queue_collector = QueueCollector(worker.engine, queues, self.cache_seconds)
        self.registry.register(self.queue_collector)
        self.registry.register(AlertCollector(worker.alerts))

    # -- health ------------------------------------------------------------------

    def liveness(self) -> tuple[bool, str]:
        """Alive when the claim loop went round recently (longer while the DB is down)."""
        limit = self.live_after or LIVE_MIN_SECONDS
        worker = self._worker
        if self.database_ok is False:
            limit += self.db_retry_grace  # the loop backs off up to this long between tries
        if worker is not None and worker.stopping:
            return True, "stopping: finishing in-flight sends"
        last = self._last_tick
        if last is None:
            waited = time.monotonic() - self._created
            return waited <= limit, f"starting ({waited:.1f}s)"
        age = time.monotonic() - last
        if age > limit:
            return False, f"stalled: the claim loop last ran {age:.1f}s ago (limit {limit:g}s)"
        return True, f"alive: the claim loop ran {age:.1f}s ago"

    def readiness(self) -> tuple[bool, str]:
        """Ready when the database answers and the transport is not paused."""
        worker = self._worker
        if worker is not None and worker.stopping:
            return False, "stopping"
        if self._last_tick is None or self.database_ok is None:
            return False, "starting"
        if not self.database_ok:
            return False, "database unreachable: the last database call failed"
        if self.transport_paused:
            return False, f"transport paused: {self.paused_reason}"
        alive, why = self.liveness()
        return (True, "ready") if alive else (False, why)


# -- the HTTP server -----------------------------------------------------------------

ALL_INTERFACES = "0.0.0.0"  # noqa: S104 - only what an operator asks for with --metrics-host
DEFAULT_HOST = "127.0.0.1"  # loopback unless MAILOUT_METRICS_HOST says otherwise
# Each connection has a thread and a file descriptor, shared with the worker's own
# SMTP and database connections: idle or slow clients get this long, and at most
# this many are served at once (more are closed at once, unread).
CONNECTION_TIMEOUT = 10.0
MAX_CONNECTIONS = 16


class MetricsServer:
    """A running metrics/health server; :meth:`close` stops it."""

    def __init__(self, httpd: _Server, thread: threading.Thread) -> None:
        self._httpd = httpd
        self._thread = thread
        host, port = httpd.server_address[:2]
        self.host, self.port = str(host), int(port)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in (ALL_INTERFACES, "") else self.host
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        """Stop serving and free the port (idempotent)."""
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def start_metrics_server(port: int, worker: WorkerView, *, host: str = DEFAULT_HOST,
                         max_connections: int = MAX_CONNECTIONS,
                         timeout: float = CONNECTION_TIMEOUT) -> MetricsServer:
    """Serve /metrics, /healthz and /readyz for ``worker`` from a daemon thread.

    The worker should be built with ``observer=PrometheusObserver()``; one built
    without an observer gets one now. ``port`` 0 picks a free port (see ``.port``).
    ``host`` is loopback by default (``MAILOUT_METRICS_HOST``). A connection that
    sends nothing for ``timeout`` seconds is closed, and beyond ``max_connections``
    at once new ones are closed unanswered, so that clients cannot use up the
    worker's threads or file descriptors.
    Raises ConfigError (MAILOUT_METRICS_PORT) when the port cannot be bound.
    """
    observer: Any = worker.observer
    if type(observer) is NullObserver:  # not a subclass (OtelObserver)
        observer = worker.observer = PrometheusObserver()
    # Built with OpenTelemetry metrics as well: the Prometheus one among them.
    observer = next((o for o in members(observer) if isinstance(o, PrometheusObserver)),
                    observer)
    if not isinstance(observer, PrometheusObserver):
        raise TypeError("start_metrics_server needs a worker built with "
                        "observer=PrometheusObserver()")
    observer.bind(worker)
    try:
        httpd = _Server((host, port), _Handler, max_connections=max_connections)
    except OSError as exc:
        raise ConfigError("MAILOUT_METRICS_PORT", f"cannot listen on {host}:{port}: "
                          f"{exc.strerror or exc}") from None
    httpd.observer = observer
    httpd.connection_timeout = timeout
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2},
                              name="mailout-metrics", daemon=True)
    thread.start()
    server = MetricsServer(httpd, thread)
    log.info("metrics and health on %s:%d (/metrics, /healthz, /readyz)",
             server.host or ALL_INTERFACES, server.port,
             extra={"event": "metrics_listening", "host": server.host or ALL_INTERFACES,
                    "port": server.port})
    return server


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # close() must not wait for a slow client's thread
    observer: PrometheusObserver
    connection_timeout: float = CONNECTION_TIMEOUT

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *,
                 max_connections: int) -> None:
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        # Over the limit: close at once, in the accepting thread (no thread, no wait).
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        # One deadline for the whole exchange: the socket timeout bounds each read only,
        # and a client sending a header byte every few seconds would hold its slot for
        # ever (16 such clients held every slot, and /healthz failed).
        cut = threading.Timer(self.connection_timeout, _hang_up, (request,))
        cut.daemon = True
        cut.start()
        try:
            super().process_request_thread(request, client_address)
        finally:
            cut.cancel()
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away (or was cut off) is routine: no traceback on stderr.
        error = sys.exc_info()[1]
        if isinstance(error, OSError | ValueError):  # ValueError: I/O on the closed file
            log.debug("metrics http: client dropped (%s)", type(error).__name__,
                      extra={"event": "metrics_client_dropped"})
            return
        log.exception("metrics http: request failed", extra={"event": "metrics_http_failed"})


def _hang_up(sock: socket.socket) -> None:
    """End a connection that outlived its deadline: its blocked read returns at once."""
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "mailout"

    def setup(self) -> None:
        # StreamRequestHandler.setup applies the class attribute ``timeout`` to the socket.
        self.request.settimeout(self.server.connection_timeout)
        super().setup()

    def do_GET(self) -> None:
        observer = self.server.observer
        path = urlsplit(self.path).path
        if path == "/metrics":
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            try:
                body = encoder(observer.registry)
            except Exception:
                log.exception("metrics: collecting failed",
                              extra={"event": "metrics_collect_failed"})
                self._reply(500, b"collecting metrics failed\n", "text/plain")
                return
            self._reply(200, body, content_type)
        elif path in ("/healthz", "/readyz"):
            ok, reason = observer.liveness() if path == "/healthz" else observer.readiness()
            self._reply(200 if ok else 503, f"{reason}\n".encode(), "text/plain")
        elif path == "/":
            self._reply(200, b"mailout worker: /metrics /healthz /readyz\n", "text/plain")
        else:
            self._reply(404, b"not found\n", "text/plain")

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics http: %s", format % args, extra={"event": "metrics_http"})
