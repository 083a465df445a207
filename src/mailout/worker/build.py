"""Assembles a worker from settings: engine, lanes, renderer, transports, alerts."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from mailout import db
from mailout.db import migrate, pooler
from mailout.db.stores import store_for
from mailout.delivery import attempt
from mailout.delivery.guards import Guards, load_registry, parse_domains
from mailout.delivery.policy import Lane
from mailout.exceptions import ConfigError
from mailout.message.render import DEFAULT_KEY_HEADER, Renderer
from mailout.message.templates import known_schemas
from mailout.metrics.observer import Observer, Observers
from mailout.metrics.otel import otel_observer
from mailout.metrics.prometheus import DEFAULT_HOST as DEFAULT_METRICS_HOST
from mailout.metrics.prometheus import PrometheusObserver, start_metrics_server
from mailout.support import tracing
from mailout.support.alerts import AlertCallback, Alerts
from mailout.support.logs import SendLog
from mailout.transports.base import Transport
from mailout.transports.multi import MultiTransport
from mailout.transports.url import KEEP_HEADER
from mailout.worker.attachments import AttachmentLoader
from mailout.worker.config import EventLoop, Settings
from mailout.worker.options import Options
from mailout.worker.runtime import Worker, make_rng, worker_name

log = logging.getLogger(__name__)

NO_NOTIFY_POLL = 0.2  # no NOTIFY wakes the worker (SQLite, MySQL, no LISTEN): poll more often
NOTIFY_POLL = 1.0  # NOTIFY wakes workers at once; polling is only the safety net
# How long a starting worker waits for a database it cannot reach (restarting, failing
# over, not up yet beside it in a deployment) before it gives up and exits.
STARTUP_WAIT_SECONDS = 60.0
STARTUP_RETRY_FIRST = 0.5  # seconds before the first new try; doubles up to the cap
STARTUP_RETRY_CAP = 5.0


def build_worker(
    settings: Settings,
    *,
    engine: Engine | None = None,
    transport_factory: Callable[[], Transport] | None = None,
    queues: Sequence[str] | None = None,
    until_idle: bool = False,
    alert_callback: AlertCallback | None = None,
    observer: Observer | None = None,
) -> Worker:
    """A ready-to-run :class:`Worker`. Raises SchemaMissing if migrations are not applied.

    Each lane gets its own transport (its own SMTP connections); ``queues`` limits
    the single default lane when no MAILOUT_LANES is set.
    """
    engine = engine or db.make_engine(settings.database_url)
    wait_for_database(engine)
    assert settings.mail_from is not None  # config.load refuses a missing MAIL_FROM
    policies = settings.policies()
    name = worker_name()
    # The key header: the relay preset's own, none for an HTTP API (the key travels in
    # its own field), else MAILOUT_IDEMPOTENCY_HEADER (informational over plain SMTP).
    key_header = settings.transport.key_header
    # A message stored whole (Django's) gets a key header only when asked: the relay's
    # own, or MAILOUT_IDEMPOTENCY_HEADER set.
    renderer = Renderer(settings.templates_dir, mail_from=settings.mail_from,
                        return_path=settings.return_path,
                        return_path_secret=settings.return_path_secret,
                        idempotency_header=(settings.idempotency_header or DEFAULT_KEY_HEADER)
                        if key_header == KEEP_HEADER else key_header,
                        whole_key_header=settings.idempotency_header
                        if key_header == KEEP_HEADER else key_header)
    lanes = settings.lane_list(queues)
    guards = _guards(settings)

    first: list[MultiTransport] = []  # the lanes' failover transports share its health

    def transport(concurrency: int) -> Transport:
        if transport_factory is not None:
            return transport_factory()
        built = settings.transport.build(concurrency)
        if isinstance(built, MultiTransport):
            # A failed member is skipped for one breaker cycle, like a paused worker.
            built.pace(settings.pause_seconds, settings.pause_cap)
            if first:
                built.share_health(first[0])
            first.append(built)
        return built

    # The OpenTelemetry API (when installed) loads now, not inside the first send.
    tracing.tracer()
    loader = AttachmentLoader(engine)
    send_log = SendLog(attempt.log, mode=settings.log_sends, recipients=settings.log_recipients)
    contexts = [
        (lane, attempt.Context(
            worker=name, policy=settings.retry_policy, renderer=renderer,
            transport=transport(lane.concurrency), rng=make_rng(),
            on_unknown=settings.on_unknown, send_log=send_log,
            queue_policies={q: p.retry for q, p in policies.items()},
            guards=guards, engine=engine, load_attachments=loader,
            trace_steps=settings.trace_steps,
            trace_recipients_key=tracing.recipients_key(settings.trace_recipients,
                                                        settings.trace_recipients_secret),
        ))
        for lane in lanes
    ]
    poll = settings.poll_seconds or (NOTIFY_POLL if _listens(engine, settings) else NO_NOTIFY_POLL)
    options = Options(
        lease_seconds=settings.lease_seconds,
        poll_seconds=poll,
        pause_seconds=settings.pause_seconds,
        pause_cap=settings.pause_cap,
        outage_seconds=settings.outage_probe,
        outage_cap=settings.outage_probe_cap,
        outage_alert_seconds=settings.outage_alert,
        shutdown_grace=settings.shutdown_grace,
        until_idle=until_idle,
        listen=settings.listen,
    )
    rates = {q: p.rate_per_second for q, p in policies.items() if p.rate_per_second}
    observer = _with_otel(observer, engine, lanes)
    return Worker(engine, contexts, options, Alerts(alert_callback, settings.alert_webhook,
                                                      log_recipients=settings.log_recipients),
                  rates, observer)


def _with_otel(observer: Observer | None, engine: Engine,
               lanes: Sequence[Lane]) -> Observer | None:
    """``observer``, and OpenTelemetry metrics too when the application configured a
    meter provider (the SDK, or ``opentelemetry-instrument``)."""
    queues = {q for ln in lanes for q in ln.queues}
    if any(not ln.queues for ln in lanes):
        queues.add("default")
    found = otel_observer(engine, queues)
    if found is None:
        return observer
    return found if observer is None else Observers(observer, found)


def _listens(engine: Engine, settings: Settings) -> bool:
    """Whether the worker will LISTEN (so NOTIFY wakes it and polling is only the
    safety net): PostgreSQL, MAILOUT_LISTEN on, and a session to LISTEN on (see
    :func:`mailout.db.pooler.listen_url`)."""
    return (settings.listen and store_for(engine).listens and
            pooler.listen_url(engine.url.render_as_string(hide_password=False)) is not None)


def _guards(settings: Settings) -> Guards:
    guards = Guards(
        checks=load_registry(settings.checks, "MAILOUT_CHECKS"),
        resolvers=load_registry(settings.resolvers, "MAILOUT_RESOLVERS"),
        redirect_to=settings.redirect_to,
        allow_domains=parse_domains(settings.allow_domains),
        schemas=known_schemas(settings.templates_dir),
        suppression=settings.suppression,
    )
    if guards.redirect_to:
        log.warning("*** MAILOUT_REDIRECT_TO is set: EVERY message goes to %s instead of "
                    "its recipient ***", guards.redirect_to,
                    extra={"event": "redirect_set", "redirect_to": guards.redirect_to})
    if guards.allow_domains is not None:
        allowed = ", ".join(sorted(guards.allow_domains))
        log.warning("*** MAILOUT_ALLOW_DOMAINS is set: messages to other domains than %s "
                    "are cancelled ***", allowed,
                    extra={"event": "allow_domains_set", "allow_domains": allowed})
    return guards


def wait_for_database(engine: Engine, budget: float = STARTUP_WAIT_SECONDS) -> None:
    """Check the schema, waiting up to ``budget`` seconds for a database that cannot be
    reached. A running worker rides out a database outage; one that starts during the
    outage waits for it too, rather than exit and leave the queue to nobody until a
    supervisor tries again. A missing schema is not waited for (SchemaMissing at once).
    """
    deadline = time.monotonic() + budget
    delay = STARTUP_RETRY_FIRST
    while True:
        try:
            migrate.require_schema(engine)
            return
        except OperationalError as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            # The error's type only: its text names the host and maybe the user.
            log.warning("database not reachable at startup (%s); trying again in %.1fs, "
                        "giving up in %.0fs", type(exc.orig).__name__, min(delay, left), left,
                        extra={"event": "startup_db_wait", "error": type(exc.orig).__name__})
            time.sleep(min(delay, left))
            delay = min(delay * 2, STARTUP_RETRY_CAP)


def run_worker(
    settings: Settings,
    *,
    queues: Sequence[str] | None = None,
    until_idle: bool = False,
    alert_callback: AlertCallback | None = None,
    metrics_port: int | None = None,
    metrics_host: str = DEFAULT_METRICS_HOST,
) -> Worker:
    """Build a worker and run it to the end in a fresh event loop.

    With ``metrics_port``, serve /metrics, /healthz and /readyz there (on
    ``metrics_host``, loopback by default) meanwhile.
    """
    observer = PrometheusObserver() if metrics_port is not None else None
    worker = build_worker(
        settings, queues=queues, until_idle=until_idle, alert_callback=alert_callback,
        observer=observer,
    )
    server = (start_metrics_server(metrics_port, worker, host=metrics_host)
              if metrics_port is not None else None)
    try:
        with asyncio.Runner(loop_factory=loop_factory(settings.event_loop)) as runner:
            runner.run(worker.run())
    finally:
        if server is not None:
            server.close()
        worker.alerts.close()
        worker.engine.dispose()
    return worker


def loop_factory(choice: EventLoop) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What makes the worker's event loop (None: asyncio's own, as ``asyncio.run``).

    uvloop runs the same worker with fewer instructions per message (figures:
    docs/capacity.md): the event loop and the sockets' reads and writes in C.
    """
    if choice is EventLoop.ASYNCIO:
        return None
    try:
        import uvloop  # optional (mailout[uvloop]): imported only when chosen
    except ImportError:
        if choice is EventLoop.UVLOOP:  # config checked it: uninstalled since
            raise ConfigError("MAILOUT_EVENT_LOOP", "uvloop is not installed") from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory
