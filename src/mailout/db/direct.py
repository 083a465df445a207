"""Short statements on the driver's cursor when nothing watches SQLAlchemy run them.

enqueue's INSERT is one small statement in the caller's transaction. Around psycopg's
own work, ``Connection.execute`` adds about as much client CPU again (an execution
context, result metadata, ``Row`` objects): most of what an enqueue adds to a
transaction beyond a hand-written INSERT (bench/enqueue_cost.py). :func:`fetch` runs
the same statement text on the connection's DB-API cursor instead, when that cannot be
told apart from ``Connection.execute``:

- the driver is psycopg 3 (sync; the async adapters go through SQLAlchemy);
- no engine, connection or dialect event listeners (tracing, statement logging,
  ``do_execute`` hooks) and no statement echo (``echo=True`` or the
  ``sqlalchemy.engine`` logger at INFO), so nothing would have seen the statement;
- the caller's transaction is begun and active, so there is no autobegin to do and
  no failed transaction to refuse (``PendingRollbackError``).

Otherwise it is ``Connection.execute``. A driver error on the direct path goes through
SQLAlchemy's own handler, so callers get the same ``sqlalchemy.exc`` classes, and a
lost connection is invalidated as usual.

Those checks read SQLAlchemy attributes that are not public (``_has_events``,
``_echo``, ``_handle_dbapi_exception``); when one is missing (a SQLAlchemy that renamed
it) the statement takes ``Connection.execute``, and tests/integration/test_enqueue_direct.py
fails on the lost fast path rather than on a changed behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.sql.elements import TextClause
from sqlalchemy.sql.selectable import TextualSelect

Statement = TextClause | TextualSelect

# Statement -> its text in the driver's paramstyle (psycopg: %(name)s), compiled once.
# The statement is kept alongside so that its id() is never reused while cached.
_DRIVER_SQL: dict[int, tuple[Statement, str]] = {}
_DRIVER = "psycopg"


def fetch(conn: Connection, stmt: Statement, params: Mapping[str, Any]) -> Sequence[Any]:
    """The rows of ``stmt`` (a textual statement with named binds and no bind
    processing) run with ``params`` in ``conn``'s transaction, as tuples.

    Errors are SQLAlchemy's, as from ``conn.execute``: ``DBAPIError`` subclasses
    wrapping the driver's, ``PendingRollbackError`` for a failed transaction."""
    if not _unobserved(conn):
        return conn.execute(stmt, params).all()
    sql = _driver_sql(conn, stmt)
    cursor = conn.connection.cursor()
    try:
        cursor.execute(sql, params)
        rows: Sequence[Any] = cursor.fetchall()
    except Exception as exc:  # every driver error: SQLAlchemy wraps and re-raises it
        conn._handle_dbapi_exception(exc, sql, params, cursor, None)
        raise  # unreachable: the handler always raises
    finally:
        cursor.close()  # on the error path too (closing twice is harmless)
    return rows


def _unobserved(conn: Connection) -> bool:
    """May ``conn`` run a statement on its cursor directly? See the module docstring."""
    if conn.dialect.driver != _DRIVER or not hasattr(conn, "_handle_dbapi_exception"):
        return False
    watched = (getattr(conn, "_has_events", True) or getattr(conn.engine, "_has_events", True)
               or getattr(conn.dialect, "_has_events", True) or getattr(conn, "_echo", True))
    if watched:
        return False
    root = conn.get_transaction()
    nested = conn.get_nested_transaction()
    return root is not None and root.is_active and (nested is None or nested.is_active)


def _driver_sql(conn: Connection, stmt: Statement) -> str:
    cached = _DRIVER_SQL.get(id(stmt))
    if cached is None:
        cached = _DRIVER_SQL[id(stmt)] = (stmt, stmt.compile(dialect=conn.dialect).string)
    return cached[1]
