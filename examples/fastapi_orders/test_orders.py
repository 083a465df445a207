"""The example's own test, with mailout.testing: the route queues the confirmation
with the order, a failed order queues nothing, and the rendered mail is checked. With
OpenTelemetry (the app instrumented, an SDK configured), the request's span holds the
enqueue, and the worker's send span links to it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from examples.fastapi_orders.app import create_app
from fastapi.testclient import TestClient
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from tests.support.tracing import InMemorySpanExporter, named
from tests.support.tracing import spans as spans  # the fixture: an in-memory SDK

from mailout import db
from mailout.db import migrate
from mailout.testing import Outbox
from mailout.testing.plugin import outbox as outbox  # the fixture, used by name

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
ORDER = {"email": "ann@example.com", "name": "Ann",
         "items": [{"name": "Tea", "quantity": 2, "price": "4.50"}]}


@pytest.fixture
def mailout_database_url(tmp_path: Path) -> str:
    """The app's own async URL: mailout's worker takes it as it is."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'shop.db'}"
    engine = db.make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    return url


@pytest.fixture
def mailout_templates() -> Path:
    """The templates the worker of ``outbox.deliver_all()`` renders with."""
    return TEMPLATES


@pytest.fixture
def client(mailout_database_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(mailout_database_url)) as test_client:
        yield test_client


def test_an_order_queues_its_confirmation(client: TestClient, outbox: Outbox) -> None:
    reply = client.post("/orders", json=ORDER)
    assert reply.status_code == 201
    order_id = reply.json()["id"]
    outbox.assert_enqueued(to="ann@example.com", template="order_confirmation",
                           key=f"order-{order_id}-confirmation", count=1)
    [mail] = outbox.deliver_all()
    assert mail.subject == f"Your order #{order_id} is confirmed"
    assert mail.text is not None
    assert "Tea" in mail.text


def test_a_failed_order_queues_nothing(client: TestClient, outbox: Outbox) -> None:
    reply = client.post("/orders", json={**ORDER, "email": "not an address"})
    assert reply.status_code == 422
    assert outbox.queued() == []
    assert client.post("/orders", json=ORDER).json()["id"] == 1  # the failed order is gone


def test_the_order_request_span_enqueues_and_the_workers_send_links_to_it(
    mailout_database_url: str, outbox: Outbox, spans: InMemorySpanExporter
) -> None:
    # What an application with OpenTelemetry has: the SDK (here the `spans` fixture's,
    # in memory) and its framework instrumented. mailout needs nothing more.
    app = create_app(mailout_database_url)
    FastAPIInstrumentor.instrument_app(app)
    try:
        with TestClient(app) as traced:
            assert traced.post("/orders", json=ORDER).status_code == 201
        outbox.deliver_all()
    finally:
        FastAPIInstrumentor.uninstrument_app(app)
    finished = spans.get_finished_spans()
    (request,) = [s for s in finished if s.name == "POST /orders"]
    (create,) = named(finished, "create")
    (send,) = named(finished, "send")
    assert create.parent is not None
    assert create.parent.span_id == request.context.span_id
    assert [(lk.context.trace_id, lk.context.span_id) for lk in send.links] == [
        (create.context.trace_id, create.context.span_id)]
    assert (send.attributes or {})["mailout.outcome"] == "sent"
