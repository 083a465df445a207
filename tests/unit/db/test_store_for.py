"""store_for: the store of an engine, a connection or a URL, named by its backend."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from mailout.db.stores import store_for


@pytest.mark.parametrize(("url", "name"), [
    ("postgresql+psycopg://u@db/app", "postgresql"),
    ("postgresql://u@db/app", "postgresql"),
    ("mysql+pymysql://u@db/app", "mysql"),
    ("mariadb+mysqldb://u@db/app", "mysql"),
    ("sqlite:///outbox.db", "sqlite"),
])
def test_a_url_names_its_databases_store(url: str, name: str) -> None:
    assert store_for(url).name == name
    assert store_for(make_url(url)) is store_for(url)


def test_a_mariadb_engine_gets_the_mysql_store() -> None:
    engine = create_engine("mariadb+pymysql://u@db/app")  # never connects
    assert engine.dialect.name == "mariadb"
    assert store_for(engine) is store_for("mysql://u@db/app")
    engine.dispose()


def test_an_engine_and_its_connection_share_one_store() -> None:
    engine = create_engine("sqlite://")
    with engine.connect() as conn:
        assert store_for(conn) is store_for(engine) is store_for("sqlite://")
    engine.dispose()


def test_a_database_without_a_store_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="no store for 'oracle'"):
        store_for("oracle://u@db/app")
