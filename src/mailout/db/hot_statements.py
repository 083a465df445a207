"""Hot statements on the driver's cursor when nothing watches SQLAlchemy run them.

Around psycopg's own work, ``Connection.execute`` adds client CPU of its own (an
execution context, result metadata built from the cursor's description, ``Row``
objects): about as much again as psycopg's for enqueue's one-row INSERT, and a fixed
cost per claim (an UPDATE ... RETURNING of 33 columns) whatever the rows it returns
(figures: docs/capacity.md, "The worker's statements"). :func:`fetch` and
:func:`fetch_mappings` run the same statement text on the connection's DB-API cursor
instead, when that cannot be told apart from ``Connection.execute``:

- the driver is psycopg 3 (sync; the async adapters go through SQLAlchemy);
- no engine, connection or dialect event listeners (tracing, statement logging,
  ``do_execute`` hooks) and no statement echo (``echo=True`` or the
  ``sqlalchemy.engine`` logger at INFO), so nothing would have seen the statement;
- the caller's transaction is begun and active, so there is no autobegin to do and
  no failed transaction to refuse (``PendingRollbackError``);
- the compiled statement needs nothing of SQLAlchemy at run time: no bind or result
  processors, no parameter expanded when it runs (``IN`` lists). Its text and its
  internal bind values (literals in the statement) are taken from one compilation.

Otherwise it is ``Connection.execute``. A driver error on the direct path goes through
SQLAlchemy's own handler, so callers get the same ``sqlalchemy.exc`` classes, and a
lost connection is invalidated as usual.

Those checks read SQLAlchemy attributes that are not public (``_has_events``,
``_echo``, ``_handle_dbapi_exception``, the compiled statement's ``_bind_processors``,
``post_compile_params``, ``literal_execute_params`` and ``_result_columns``, and the
column types' ``_cached_result_processor``), all in this module. Supported: SQLAlchemy
>= 2.0.30, < 2.2 (:data:`SUPPORTED`; the bound in pyproject.toml).
tests/unit/db/test_sqlalchemy_compat.py checks the installed version is in that range
and that each attribute is still there with the meaning read here: when one goes
missing (a SQLAlchemy that renamed it) the statement quietly takes
``Connection.execute``, and that test, and tests/integration/db/test_hot_statements_*.py,
fail on the lost fast path rather than on a changed behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sqlalchemy import Connection, Dialect
from sqlalchemy.sql.compiler import Compiled
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.elements import TextClause
from sqlalchemy.sql.selectable import Select, TextualSelect

from mailout.support.bounded_cache import BoundedCache

Statement = TextClause | TextualSelect | Select[Any] | UpdateBase

_DRIVER = "psycopg"
SUPPORTED: Final = ((2, 0, 30), (2, 2))  # lowest supported, first unsupported


@dataclass
class _Prepared:
    """One statement compiled for the driver, and whether it may bypass SQLAlchemy."""

    stmt: Statement  # kept so that its id() is never reused while cached
    compiled: Compiled
    sql: str  # in the driver's paramstyle (psycopg: %(name)s)
    direct: bool  # nothing of SQLAlchemy's is needed when it runs
    # A textual statement's binds are exactly the caller's; other statements have
    # internal ones (literal values), filled in by construct_params.
    textual: bool
    names: list[str] = field(default_factory=list)  # result columns, once known


# id(statement) -> its compilation. Statements are module-level or lru-cached (one
# claim per lane filter); a worker whose paused templates keep changing builds new
# ones, and the least recently run are dropped (the module-level ones stay).
_PREPARED: BoundedCache[int, _Prepared] = BoundedCache(512)


def fetch(conn: Connection, stmt: Statement, params: Mapping[str, Any]) -> Sequence[Any]:
    """The rows of ``stmt`` run with ``params`` in ``conn``'s transaction, as tuples.

    Errors are SQLAlchemy's, as from ``conn.execute``: ``DBAPIError`` subclasses
    wrapping the driver's, ``PendingRollbackError`` for a failed transaction."""
    prepared = _prepared(conn, stmt) if _unobserved(conn) else None
    if prepared is None or not prepared.direct:
        return conn.execute(stmt, params).all()
    return _run(conn, prepared, params)


def fetch_mappings(conn: Connection, stmt: Statement,
                   params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """As :func:`fetch`, each row a dict keyed by its column's name (or label), as
    ``conn.execute(stmt, params).mappings()`` would key it."""
    prepared = _prepared(conn, stmt) if _unobserved(conn) else None
    if prepared is None or not prepared.direct:
        return [dict(row) for row in conn.execute(stmt, params).mappings()]
    rows = _run(conn, prepared, params)
    names = prepared.names
    return [dict(zip(names, row, strict=True)) for row in rows]


def _run(conn: Connection, prepared: _Prepared, params: Mapping[str, Any]) -> Sequence[Any]:
    sql = prepared.sql
    values = params if prepared.textual else prepared.compiled.construct_params(params)
    cursor = conn.connection.cursor()
    try:
        cursor.execute(sql, values)
        rows: Sequence[Any] = cursor.fetchall()
        if not prepared.names and cursor.description is not None:
            prepared.names = [column[0] for column in cursor.description]
    except Exception as exc:  # every driver error: SQLAlchemy wraps and re-raises it
        conn._handle_dbapi_exception(exc, sql, values, cursor, None)
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


def _prepared(conn: Connection, stmt: Statement) -> _Prepared:
    cached = _PREPARED.get(id(stmt))
    if cached is None:
        compiled = stmt.compile(dialect=conn.dialect)
        cached = _Prepared(stmt, compiled, compiled.string, needs_nothing(compiled, conn.dialect),
                           isinstance(stmt, TextClause | TextualSelect))
        _PREPARED.put(id(stmt), cached)
    return cached


def needs_nothing(compiled: Compiled, dialect: Dialect) -> bool:
    """True when running ``compiled`` needs no SQLAlchemy processing: no bind
    processors, no parameters expanded at execution, no result processors."""
    if getattr(compiled, "_bind_processors", True) or getattr(
            compiled, "post_compile_params", True) or getattr(
            compiled, "literal_execute_params", True):
        return False
    columns = getattr(compiled, "_result_columns", None)
    if columns is None:
        return False
    return all(column[3]._cached_result_processor(dialect, None) is None
               for column in columns)
