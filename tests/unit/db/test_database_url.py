"""The URL spellings the worker and the CLI accept for one database, and the drivers
they select."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from mailout import db
from mailout.db import database_url
from mailout.exceptions import ConfigError


@pytest.mark.parametrize(("given", "used"), [
    ("postgresql://app@db/shop", "postgresql+psycopg://app@db/shop"),
    ("postgres://app@db/shop", "postgresql+psycopg://app@db/shop"),
    # An async application's own URL: the worker takes it as it is.
    ("postgresql+asyncpg://app:pw@db:5433/shop", "postgresql+psycopg://app:pw@db:5433/shop"),
    ("sqlite+aiosqlite:///var/shop.db", "sqlite:///var/shop.db"),
    ("postgresql+psycopg://app@db/shop", "postgresql+psycopg://app@db/shop"),
    ("mysql://u:p@h/d", "mysql+pymysql://u:p@h/d"),
    ("mariadb://u:p@h:3307/d", "mysql+pymysql://u:p@h:3307/d"),
    ("MySQL://u@h/d", "mysql+pymysql://u@h/d"),
    ("mysql+pymysql://u@h/d", "mysql+pymysql://u@h/d"),
    ("mysql+aiomysql://u@h/d", "mysql+pymysql://u@h/d"),
    ("sqlite:///x.db", "sqlite:///x.db"),
])
def test_spellings_of_one_database_select_its_supported_driver(given: str, used: str) -> None:
    assert database_url(given) == used


def test_mysql_engines_run_read_committed_in_utc() -> None:
    engine = db.make_engine("mariadb://u@127.0.0.1:1/d")
    assert engine.dialect.name == "mysql"
    assert engine.get_execution_options()["isolation_level"] == "READ COMMITTED"
    engine.dispose()


def test_a_mysql_url_without_the_extra_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec

    def without_pymysql(name: str, *args: Any) -> Any:
        return None if name == "pymysql" else real(name, *args)

    # The environment stand-in: PyMySQL is not installed.
    monkeypatch.setattr(importlib.util, "find_spec", without_pymysql)
    with pytest.raises(ConfigError) as err:
        db.database_url("mysql://u@h/d")
    message = str(err.value)
    assert "pip install 'mailout[mysql]'" in message
    assert "\n" not in message
