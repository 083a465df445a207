"""Wait until another session is seen waiting on a lock (PostgreSQL, MariaDB/MySQL).

A test that proves a statement *waits* (for a row lock, for a duplicate key's
transaction) would otherwise hold its own transaction open for a fixed time and
check the statement has not finished: too short on a busy machine, where the
statement may not have started yet, and proving nothing then. The server says when a
session waits on a lock; these helpers wait for that state.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import Engine, text

# InnoDB refreshes information_schema.innodb_trx only when it was last read more than
# 100 ms ago: polled faster, it shows the first read's snapshot for ever.
_PAUSE = {"mysql": 0.15, "postgresql": 0.02}
# Sessions of this database only: other tests (other xdist workers, other runs) share
# the server.
_WAITING = {
    "postgresql": "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                  "AND datname = current_database() AND query ILIKE :pattern",
    "mysql": "SELECT count(*) FROM information_schema.innodb_trx t "
             "JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id "
             "WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE() "
             "AND t.trx_query LIKE :pattern",
}


def lock_waiters(engine: Engine, pattern: str) -> int:
    """How many sessions wait on a lock in a statement matching ``pattern`` (LIKE)."""
    with engine.connect() as conn:
        waiting: int = conn.execute(text(_WAITING[engine.dialect.name]),
                                    {"pattern": pattern}).scalar_one()
    return waiting


def wait_for_lock_waiter(engine: Engine, pattern: str, timeout: float = 60.0,
                         context: Callable[[], str] = str) -> None:
    """Return once a session waits on a lock in a statement matching ``pattern`` (a
    LIKE pattern, case-insensitive on PostgreSQL); fail after ``timeout`` seconds,
    with ``context()`` (a log tail) in the message."""
    deadline = time.monotonic() + timeout
    pause = _PAUSE[engine.dialect.name]
    while lock_waiters(engine, pattern) == 0:
        if time.monotonic() > deadline:
            raise AssertionError(f"no session waited on a lock in {pattern!r} within "
                                 f"{timeout:.0f}s\n{context()}")
        time.sleep(pause)
