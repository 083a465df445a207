"""The FastAPI example on PostgreSQL through asyncpg: the application's own
``postgresql+asyncpg://`` URL serves the app, mailout's migrations and the worker.
(examples/fastapi_orders/test_orders.py runs it on SQLite through aiosqlite.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from examples.fastapi_orders.app import create_app
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.engine import make_url

from mailout import db
from mailout.testing import Outbox

TEMPLATES = Path(__file__).resolve().parents[2] / "examples" / "templates"


@pytest.fixture
def mailout_database_url(pg_url: str) -> Iterator[str]:
    url = make_url(pg_url).set(drivername="postgresql+asyncpg")
    yield url.render_as_string(hide_password=False)
    engine = db.make_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS orders"))
    engine.dispose()


@pytest.fixture
def mailout_templates() -> Path:
    return TEMPLATES


def test_the_asyncpg_url_serves_the_app_and_the_worker(
    mailout_database_url: str, outbox: Outbox,
) -> None:
    order = {"email": "ann@example.com", "name": "Ann",
             "items": [{"name": "Tea", "quantity": 1, "price": "4.50"}]}
    with TestClient(create_app(mailout_database_url)) as client:
        assert client.post("/orders", json=order).status_code == 201
        assert client.post("/orders", json={**order, "email": "bad"}).status_code == 422
    [queued] = outbox.assert_enqueued(to="ann@example.com", count=1)
    [mail] = outbox.deliver_all()  # a worker opened with the app's asyncpg URL
    assert mail.subject == f"Your order #{queued.params['order_id']} is confirmed"
