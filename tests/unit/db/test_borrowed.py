"""Which drivers a borrowed connection accepts, and the refusal for the others."""

from __future__ import annotations

import sqlite3

import pytest

from mailout.db.borrowed import driver_of
from mailout.exceptions import ConfigError


def test_sqlite3_connections_are_borrowed_through_pysqlite() -> None:
    conn = sqlite3.connect(":memory:")
    assert driver_of(conn) == "sqlite+pysqlite"
    conn.close()


def _connection_of(module: str) -> object:
    """An object whose class claims to come from ``module``, as a driver's would."""
    return type("Connection", (), {"__module__": module})()


@pytest.mark.parametrize(("module", "driver"), [("MySQLdb.connections", "mysql+mysqldb"),
                                                ("pymysql.connections", "mysql+pymysql")])
def test_mysql_connections_are_borrowed_through_their_own_driver(module: str,
                                                                 driver: str) -> None:
    assert driver_of(_connection_of(module)) == driver


def test_a_database_without_a_mailout_store_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="no Oracle store yet"):
        driver_of(_connection_of("oracledb.connection"))


def test_an_unknown_driver_is_refused_with_the_supported_ones() -> None:
    with pytest.raises(ConfigError, match=r"psycopg 3 .*, sqlite3, mysqlclient and PyMySQL"):
        driver_of(_connection_of("psycopg2.extensions"))
