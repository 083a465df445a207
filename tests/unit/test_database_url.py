"""The URL spellings the worker and the CLI accept for one database."""

from __future__ import annotations

import pytest

from mailout.db import database_url


@pytest.mark.parametrize(("given", "used"), [
    ("postgresql://app@db/shop", "postgresql+psycopg://app@db/shop"),
    ("postgres://app@db/shop", "postgresql+psycopg://app@db/shop"),
    # An async application's own URL: the worker takes it as it is.
    ("postgresql+asyncpg://app:pw@db:5433/shop", "postgresql+psycopg://app:pw@db:5433/shop"),
    ("sqlite+aiosqlite:///var/shop.db", "sqlite:///var/shop.db"),
    ("postgresql+psycopg://app@db/shop", "postgresql+psycopg://app@db/shop"),
])
def test_spellings_of_one_database_select_its_supported_driver(given: str, used: str) -> None:
    assert database_url(given) == used
