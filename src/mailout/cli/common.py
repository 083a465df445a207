"""What the CLI's commands share: option parsers, the database, shared constants.

Imported by :mod:`mailout.cli.main` and the command modules; imports none of them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click
from sqlalchemy import Engine

from mailout import db
from mailout.db import migrate
from mailout.db.engine import sqlite_file
from mailout.delivery.policy import duration_seconds

DB_HELP = "Database URL [env: MAILOUT_DATABASE_URL; default: sqlite:///mailout.db]"
WINDOW_ENV = "MAILOUT_IDEMPOTENCY_WINDOW"
DEFAULT_WINDOW = "30d"
MAX_SPAN = timedelta(days=100 * 366)  # --since, --older-than: further back is a typo
# Row ids and --limit as every database stores them (a 64-bit signed integer).
ROW_ID = click.IntRange(1, 2**63 - 1)
LIMIT = click.IntRange(1, 1_000_000)
# purge --batch: a transaction of more rows holds its locks, and the WAL, too long.
PURGE_BATCH = click.IntRange(1, 100_000)
FINAL_STATUSES = ("sent", "failed", "dead", "cancelled")
# Exit codes (docs/cli.md): 0 done, 1 an error, 2 bad usage or input, and
EXIT_TRANSPORT_DOWN = 3  # worker --until-idle stopped: the transport is paused or down
EXIT_WORKER_FAILED = 4  # worker stopped itself: a side task kept failing (WorkerFailed)
EXIT_SOME_NOT_SENT = 5  # worker --until-idle finished, but some messages failed or died
# Default ports of the servers the CLI starts, all on loopback: distinct, so that the
# console, the webhook receiver and the development sink can run side by side.
WEB_PORT = 8025  # mailout web
WEBHOOKS_PORT = 8026  # mailout webhooks serve
DEV_SINK_PORT = 2525  # mailout dev-sink (SMTP); also the default of its SMTP_PORT


def parse_span(text: str) -> timedelta:
    """A span of time in :func:`mailout.delivery.policy.duration_seconds`'s grammar.

    Raises ValueError for anything else, including a bare number: "30" could mean
    seconds or days, and guessing wrong here deletes data, and for a span over
    :data:`MAX_SPAN` (no database date reaches that far back).
    """
    seconds = duration_seconds(text, bare_seconds=False)
    if not seconds <= MAX_SPAN.total_seconds():
        raise ValueError(f"{text!r} is longer than {MAX_SPAN.days} days")
    return timedelta(seconds=seconds)


def parse_moment(text: str) -> datetime:
    """An ISO 8601 date or date-time; without a zone it is UTC. Raises ValueError."""
    moment = datetime.fromisoformat(text.strip())
    try:
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59-12:00 is past the last representable UTC time
        raise ValueError(f"{text!r} is out of range") from None


def span_option(ctx: click.Context, param: click.Parameter,
                     value: str | None) -> timedelta | None:
    try:
        return None if value is None else parse_span(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def pause_option(ctx: click.Context, param: click.Parameter, value: str) -> float:
    """Seconds to pause (``0.25``, ``1s``), at most :data:`MAX_PAUSE`."""
    try:
        seconds = duration_seconds(value, bare_seconds=True)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
    if seconds > MAX_PAUSE:
        raise click.BadParameter(f"{value!r} is longer than {MAX_PAUSE:.0f} seconds", ctx, param)
    return seconds


MAX_PAUSE = 60.0  # --pause: longer is a typo for a unit (60m), and a purge that never ends


def since_option(ctx: click.Context, param: click.Parameter,
                  value: str | None) -> timedelta | datetime | None:
    """A span back from now (``1h``) or an ISO moment (``2024-05-01T12:00``)."""
    if value is None:
        return None
    try:
        return parse_span(value)
    except ValueError:
        pass
    try:
        return parse_moment(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a duration (1h, 30m) nor an ISO "
                                 "date-time", ctx, param) from None


def engine_for(obj: dict[str, Any]) -> Engine:
    """The engine for ``--db``, checked to be migrated (SchemaMissing otherwise).

    A SQLite file that does not exist is an error, not a new empty database: only
    ``db upgrade`` creates one."""
    url = db.database_url(obj["db_url"])
    path = sqlite_file(url)
    if path is not None and not Path(path).exists():
        raise click.ClickException(f"the database file {path} does not exist: check --db / "
                                   "MAILOUT_DATABASE_URL, or create it with `mailout db "
                                   "upgrade`")
    engine = db.make_engine(url)
    migrate.require_schema(engine)
    return engine


def choose_statuses(raw: str, hint: str, *, allowed: Any) -> list[str]:
    """The comma-separated statuses of ``raw``, each one of ``allowed`` (an enum);
    BadParameter (exit 2) naming ``hint`` otherwise."""
    values = [s.strip().lower() for s in raw.split(",") if s.strip()]
    names = [s.value for s in allowed]
    bad = [v for v in values if v not in names]
    if bad or not values:
        raise click.BadParameter(f"{', '.join(bad) or raw!r}: choose from {', '.join(names)}",
                                 param_hint=hint)
    return values
