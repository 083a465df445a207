"""The SQLAlchemy internals mailout.db.hot_statements relies on: the installed version is
in the supported range, and each private name is still there with the shape and meaning
the module reads it with.

hot_statements reads them with ``getattr`` defaults, so a SQLAlchemy that renamed one
would not break anything: every statement would quietly take ``Connection.execute``
again and the worker's claim would cost its 0.6 ms more. This test makes that loud,
naming the attribute. (tests/integration/db/test_hot_statements_*.py show the fast path
is taken against a real PostgreSQL.)"""

from __future__ import annotations

import inspect
import sqlite3
from importlib.metadata import version
from typing import Any

import pytest
from sqlalchemy import (
    Integer,
    String,
    TypeDecorator,
    bindparam,
    column,
    create_engine,
    event,
    table,
    text,
)
from sqlalchemy import select as sa_select
from sqlalchemy.dialects.postgresql import psycopg
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.compiler import Compiled

from mailout.db import hot_statements
from tests.support.pins import installed, pinned_range, shown

LOWEST, FIRST_UNSUPPORTED = hot_statements.SUPPORTED
DIALECT = psycopg.dialect()
T = table("t", column("a", String), column("b", Integer))


def changed(what: str) -> str:
    return (f"SQLAlchemy {version('sqlalchemy')} changed {what}, which "
            "mailout/db/hot_statements.py relies on (supported: "
            f">={shown(LOWEST)},<{shown(FIRST_UNSUPPORTED)}); adapt that module, then "
            "move SUPPORTED and the bound in pyproject.toml")


class Tagged(TypeDecorator[str]):
    """A column type with processors of its own, as a statement must not have to
    run on the cursor."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        return value

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return value


def compiled(stmt: Any) -> Compiled:
    return stmt.compile(dialect=DIALECT)


def test_the_installed_sqlalchemy_is_in_the_supported_range() -> None:
    assert LOWEST <= installed("sqlalchemy") < FIRST_UNSUPPORTED, changed("its version")


def test_pyproject_pins_the_supported_range() -> None:
    assert pinned_range("sqlalchemy") == hot_statements.SUPPORTED


@pytest.mark.parametrize("name", ["_has_events", "_echo"])
def test_connection_flags_are_false_when_nothing_watches(name: str) -> None:
    engine = create_engine("sqlite://")
    with engine.connect() as conn:
        for owner in (conn, conn.engine, conn.dialect) if name == "_has_events" else (conn,):
            assert getattr(owner, name, None) is False, \
                changed(f"{type(owner).__name__}.{name} (False when nothing watches)")


def test_has_events_turns_true_with_a_listener() -> None:
    engine = create_engine("sqlite://")
    event.listen(engine, "before_cursor_execute", lambda *args: None)
    assert engine._has_events, changed("Engine._has_events (True once a listener is added)")
    with create_engine("sqlite://").connect() as conn:
        event.listen(conn, "before_cursor_execute", lambda *args: None)
        assert conn._has_events, \
            changed("Connection._has_events (True once a listener is added)")


def test_echo_turns_true_with_echo() -> None:
    with create_engine("sqlite://", echo=True).connect() as conn:
        assert conn._echo, changed("Connection._echo (True with echo=True)")


def test_handle_dbapi_exception_wraps_and_raises() -> None:
    parameters = list(inspect.signature(Connection._handle_dbapi_exception).parameters)
    assert parameters[:6] == ["self", "e", "statement", "parameters", "cursor", "context"], \
        changed("Connection._handle_dbapi_exception()'s parameters")
    with create_engine("sqlite://").connect() as conn:
        cursor = conn.connection.cursor()
        with pytest.raises(sqlite3.Error) as failed:
            cursor.execute("select * from missing")
        with pytest.raises(DBAPIError) as raised:
            conn._handle_dbapi_exception(failed.value, "select * from missing", {}, cursor, None)
    assert raised.value.orig is failed.value, changed("_handle_dbapi_exception (wraps)")


def test_a_plain_statement_needs_nothing_at_run_time() -> None:
    plain = compiled(sa_select(T.c.a, T.c.b).where(T.c.b == bindparam("b")))
    assert getattr(plain, "_bind_processors", None) == {}, changed("Compiled._bind_processors")
    assert getattr(plain, "post_compile_params", None) == frozenset(), \
        changed("Compiled.post_compile_params")
    assert getattr(plain, "literal_execute_params", None) == frozenset(), \
        changed("Compiled.literal_execute_params")
    columns = getattr(plain, "_result_columns", None)
    assert columns is not None, changed("Compiled._result_columns")
    assert len(columns[0]) >= 4, changed("Compiled._result_columns (4 fields an entry)")
    assert columns[0][3]._cached_result_processor(DIALECT, None) is None, \
        changed("TypeEngine._cached_result_processor (the 4th field is the column's type)")
    assert hot_statements.needs_nothing(plain, DIALECT)


def test_each_thing_a_statement_can_need_is_seen() -> None:
    expanding = compiled(sa_select(T.c.a).where(T.c.b.in_(bindparam("ids", expanding=True))))
    assert expanding.post_compile_params, changed("post_compile_params (an IN list)")
    literal = compiled(sa_select(T.c.a).where(T.c.b == bindparam("b", literal_execute=True)))
    assert literal.literal_execute_params, changed("literal_execute_params")
    tagged = table("u", column("c", Tagged))
    bound = compiled(sa_select(tagged.c.c).where(tagged.c.c == bindparam("c")))
    assert bound._bind_processors, changed("_bind_processors (a type's bind processor)")
    result = compiled(sa_select(tagged.c.c))
    assert result._result_columns[0][3]._cached_result_processor(DIALECT, None) is not None, \
        changed("_cached_result_processor (a type's result processor)")
    for stmt in (expanding, literal, bound, result):
        assert not hot_statements.needs_nothing(stmt, DIALECT)
    assert hot_statements.needs_nothing(compiled(text("select 1")), DIALECT)
