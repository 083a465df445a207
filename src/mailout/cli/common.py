"""What the CLI's commands share: option parsers, the database, shared constants.

Imported by :mod:`mailout.cli.main` and the command modules; imports none of them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import click
from sqlalchemy import Engine

from mailout import db
from mailout.db import migrate
from mailout.policy import duration_seconds

DB_HELP = "Database URL [env: MAILOUT_DATABASE_URL; default: sqlite:///mailout.db]"
WINDOW_ENV = "MAILOUT_IDEMPOTENCY_WINDOW"
DEFAULT_WINDOW = "30d"
PURGE_BATCH = 1000
FINAL_STATUSES = ("sent", "failed", "dead", "cancelled")
# Exit codes (docs/cli.md): 0 done, 1 an error, 2 bad usage or input, and
EXIT_TRANSPORT_DOWN = 3  # worker --until-idle stopped: the transport is paused or down
# Default ports of the servers the CLI starts, all on loopback: distinct, so that the
# console, the webhook receiver and the development sink can run side by side.
WEB_PORT = 8025  # mailout web
WEBHOOKS_PORT = 8026  # mailout webhooks serve
DEV_SINK_PORT = 2525  # mailout dev-sink (SMTP); also the default of its SMTP_PORT


def parse_span(text: str) -> timedelta:
    """A span of time in :func:`mailout.policy.duration_seconds`'s grammar.

    Raises ValueError for anything else, including a bare number: "30" could mean
    seconds or days, and guessing wrong here deletes data.
    """
    return timedelta(seconds=duration_seconds(text, bare_seconds=False))


def parse_moment(text: str) -> datetime:
    """An ISO 8601 date or date-time; without a zone it is UTC. Raises ValueError."""
    moment = datetime.fromisoformat(text.strip())
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def span_option(ctx: click.Context, param: click.Parameter,
                     value: str | None) -> timedelta | None:
    try:
        return None if value is None else parse_span(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


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
    """The engine for ``--db``, checked to be migrated (SchemaMissing otherwise)."""
    engine = db.make_engine(obj["db_url"])
    migrate.require_schema(engine)
    return engine
