"""The sign-up example under OpenTelemetry: the Django app instrumented
(``opentelemetry-instrumentation-django``), an SDK with an in-memory exporter, a real
worker sending over real SMTP. The request's span holds the ``create`` span, and the
worker's ``send`` span links to it. Runs in the test Django project, with this
example's URLs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import run_until_idle, settings_for
from django.test import Client
from opentelemetry.instrumentation.django import DjangoInstrumentor
from tests.support.django_fixtures import DATABASES
from tests.support.tracing import InMemorySpanExporter, named, trace
from tests.support.tracing import spans as spans  # the fixture: an in-memory SDK

from mailout.contrib.django.connection import database_url

# The project's views run under ATOMIC_REQUESTS on each of its databases.
pytestmark = pytest.mark.django_db(databases=list(DATABASES), transaction=True)


@pytest.fixture
def instrumented(settings: Any, _pg_sessions_closed: None) -> Iterator[None]:
    # ``settings``: pytest-django's wrapper, restored after the test.
    # Django's test set-up swaps EMAIL_BACKEND for its in-memory one: mailout's here.
    settings.EMAIL_BACKEND = "mailout.contrib.django.EmailBackend"
    settings.ROOT_URLCONF = "examples.django_signup.urls"
    settings.MAILOUT_DATABASE = "default"
    DjangoInstrumentor().instrument()  # adds its middleware to settings.MIDDLEWARE
    try:
        yield
    finally:
        DjangoInstrumentor().uninstrument()


def test_the_signup_request_span_enqueues_and_the_workers_send_links_to_it(
    instrumented: None, smtp_server: SmtpTestServer, spans: InMemorySpanExporter
) -> None:
    reply = Client().post("/signup/", {"email": "new.customer@example.com"})
    assert reply.status_code == 201
    run_until_idle(settings_for(database_url("default"), smtp_server))
    assert [m.rcpt_tos for m in smtp_server.messages][-1] == ("new.customer@example.com",)
    finished = spans.get_finished_spans()
    (request,) = [s for s in finished if s.kind is trace.SpanKind.SERVER]
    assert request.name.startswith("POST")
    (create,) = named(finished, "create")
    assert create.parent is not None
    assert create.parent.span_id == request.context.span_id
    (send,) = [s for s in named(finished, "send") if [lk.context.span_id for lk in s.links]
               == [create.context.span_id]]
    assert (send.attributes or {})["mailout.outcome"] == "sent"
