"""Times from the database, made comparable: every stored time is UTC.

SQLite hands back naive datetimes, PostgreSQL aware ones; comparing the two kinds
raises TypeError. Every module that reads a time from the database goes through
:func:`aware`. Pure, no I/O.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload


@overload
def aware(value: datetime) -> datetime: ...
@overload
def aware(value: None) -> None: ...
@overload
def aware(value: datetime | None) -> datetime | None: ...


def aware(value: datetime | None) -> datetime | None:
    """``value`` in UTC: a naive datetime is taken to be UTC already; None stays None."""
    if value is None:
        return None
    if value.tzinfo is UTC:
        return value  # already what every caller wants: no new object
    if value.tzinfo is None or value.utcoffset() is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)
