"""Recent activity from the attempt log: outcome counts per time bucket. (What the
last attempts say about the transport is :mod:`mailout.db.outages`.)

It reads ranges of the ``(outcome, finished_at)`` index, so their cost follows
the attempts in the window, not the size of the log. Buckets are computed on the
database (epoch seconds, integer division) and windows end at the database's now.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Float, Integer, bindparam, func, select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import FunctionElement

from mailout.db.schema import attempts, db_now
from mailout.support.timeutil import aware


class epoch_seconds(FunctionElement[Any]):
    """Seconds since 1970 of a timestamp column, as a float, on every dialect."""

    type = Float()
    inherit_cache = True


@compiles(epoch_seconds)
def _epoch_default(element: epoch_seconds, compiler: SQLCompiler, **kw: Any) -> str:
    return f"EXTRACT(EPOCH FROM {compiler.process(element.clauses, **kw)})"


@compiles(epoch_seconds, "sqlite")
def _epoch_sqlite(element: epoch_seconds, compiler: SQLCompiler, **kw: Any) -> str:
    # julianday() reads the stored text; 2440587.5 is the Julian day of 1970-01-01.
    return f"((julianday({compiler.process(element.clauses, **kw)}) - 2440587.5) * 86400.0)"


@compiles(epoch_seconds, "mysql")
def _epoch_mysql(element: epoch_seconds, compiler: SQLCompiler, **kw: Any) -> str:
    return f"UNIX_TIMESTAMP({compiler.process(element.clauses, **kw)})"


class floor_int(FunctionElement[Any]):
    """The integer part of a non-negative number (CAST rounds on PostgreSQL)."""

    type = Integer()
    inherit_cache = True


@compiles(floor_int)
def _floor_default(element: floor_int, compiler: SQLCompiler, **kw: Any) -> str:
    return f"CAST(FLOOR({compiler.process(element.clauses, **kw)}) AS INTEGER)"


@compiles(floor_int, "sqlite")
def _floor_sqlite(element: floor_int, compiler: SQLCompiler, **kw: Any) -> str:
    # FLOOR() needs SQLite's optional math functions; CAST truncates, which is the
    # floor for the non-negative offsets this is used on.
    return f"CAST({compiler.process(element.clauses, **kw)} AS INTEGER)"


@compiles(floor_int, "mysql")
def _floor_mysql(element: floor_int, compiler: SQLCompiler, **kw: Any) -> str:
    return f"FLOOR({compiler.process(element.clauses, **kw)})"


@dataclass(frozen=True, slots=True)
class Activity:
    """Outcome counts in equal buckets over a window ending now, oldest first."""

    now: datetime
    span: timedelta
    buckets: int
    counts: dict[str, list[int]]  # outcome -> one count per bucket

    def total(self, outcome: str) -> int:
        return sum(self.counts.get(outcome, ()))


def activity(conn: Connection, outcomes: Sequence[str], *, span: timedelta,
             buckets: int) -> Activity:
    """How many attempts ended in each of ``outcomes`` per bucket of the last ``span``.

    Raises ValueError for a non-positive span or bucket count.
    """
    if buckets < 1 or span.total_seconds() <= 0:
        raise ValueError("span and buckets must be positive")
    now = aware(conn.execute(select(db_now())).scalar_one())
    assert now is not None  # the database always knows the time
    start = now - span
    width = span.total_seconds() / buckets
    start_epoch = start.timestamp()
    offset = epoch_seconds(attempts.c.finished_at) - bindparam("start", start_epoch, Float)
    bucket = floor_int(offset / bindparam("width", width, Float))
    stmt = (
        select(attempts.c.outcome, bucket.label("b"), func.count())
        # An aware UTC bind works on SQLite too: its binding keeps the UTC digits.
        .where(attempts.c.outcome.in_(list(outcomes)), attempts.c.finished_at >= start)
        .group_by(attempts.c.outcome, bucket)
    )
    counts = {o: [0] * buckets for o in outcomes}
    for outcome, b, n in conn.execute(stmt):
        counts[outcome][min(max(int(b), 0), buckets - 1)] += n
    return Activity(now=now, span=span, buckets=buckets, counts=counts)
