"""Assembles a worker from settings: engine, renderer, transport, alerts."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from sqlalchemy import Engine

from mailout import attempt, db
from mailout.alerts import AlertCallback, Alerts
from mailout.config import Settings
from mailout.render import Renderer
from mailout.smtp import SmtpTransport
from mailout.transport import Transport
from mailout.worker import Options, Worker, make_rng, worker_name

log = logging.getLogger("mailout.worker")


def build_worker(
    settings: Settings,
    *,
    engine: Engine | None = None,
    transport: Transport | None = None,
    queues: Sequence[str] | None = None,
    until_idle: bool = False,
    alert_callback: AlertCallback | None = None,
) -> Worker:
    """A ready-to-run :class:`Worker`. Raises SchemaMissing if migrations are not applied."""
    engine = engine or db.make_engine(settings.database_url)
    db.require_schema(engine)
    assert settings.mail_from is not None  # config.load refuses a missing MAIL_FROM
    ctx = attempt.Context(
        worker=worker_name(),
        policy=settings.retry_policy,
        renderer=Renderer(
            settings.templates_dir,
            mail_from=settings.mail_from,
            idempotency_header=settings.idempotency_header,
        ),
        transport=transport or SmtpTransport(settings.smtp()),
        rng=make_rng(),
        on_unknown=settings.on_unknown,
    )
    options = Options(
        concurrency=settings.concurrency,
        lease_seconds=settings.lease_seconds,
        poll_seconds=settings.poll_seconds,
        pause_seconds=settings.pause_seconds,
        pause_cap=settings.pause_cap,
        shutdown_grace=settings.shutdown_grace,
        queues=list(queues) if queues else None,
        until_idle=until_idle,
    )
    return Worker(engine, ctx, options, Alerts(alert_callback, settings.alert_webhook))


def run_worker(
    settings: Settings,
    *,
    queues: Sequence[str] | None = None,
    until_idle: bool = False,
    alert_callback: AlertCallback | None = None,
) -> Worker:
    """Build a worker and run it to the end in a fresh event loop."""
    worker = build_worker(
        settings, queues=queues, until_idle=until_idle, alert_callback=alert_callback
    )
    try:
        asyncio.run(worker.run())
    finally:
        worker.alerts.close()
        worker.engine.dispose()
    return worker
