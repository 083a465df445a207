"""The Django view over a real WSGI server (wsgiref), storing into the database."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
from bench.support import webhooks as w
from sqlalchemy import Engine, func, select

from mailout.db.schema import events
from mailout.webhooks.handler import WebhookHandler
from mailout.webhooks.settings import WebhookSettings, svix_secret


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def django_url(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(DEBUG=False, ALLOWED_HOSTS=["127.0.0.1"], ROOT_URLCONF=__name__,
                           SECRET_KEY="test-only-not-secret", MIDDLEWARE=[
                               "django.middleware.csrf.CsrfViewMiddleware"])
        django.setup()
    from django.core.wsgi import get_wsgi_application
    from django.test import override_settings
    from django.urls import path

    from mailout.contrib.django.webhooks import webhook_view

    handler = WebhookHandler(engine, WebhookSettings(
        resend_secret=svix_secret("t", w.RESEND_SECRET), bounce_rate_alert=None,
        complaint_rate_alert=None))
    global urlpatterns
    urlpatterns = [path("webhooks/<str:provider>", webhook_view(handler=handler))]
    from django.urls import clear_url_caches

    # The suite's Django project (tests/djangoproject) is configured already: this
    # module's URLs stand in for its own while the test runs, and its views are not
    # wrapped in transactions of Django's databases (this view stores through mailout).
    for conf in settings.DATABASES.values():
        monkeypatch.setitem(conf, "ATOMIC_REQUESTS", False)
    with override_settings(ROOT_URLCONF=__name__,
                           MIDDLEWARE=["django.middleware.csrf.CsrfViewMiddleware"]):
        clear_url_caches()
        server = make_server("127.0.0.1", 0, get_wsgi_application(), handler_class=_Quiet)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.server_port}/webhooks"
        server.shutdown()
        server.server_close()
    clear_url_caches()


urlpatterns: list[object] = []


def test_the_django_view_verifies_and_stores(django_url: str, engine: Engine) -> None:
    doc = w.resend_event("email.complained", "c@example.com", "pid-1")
    body, headers = w.resend_request(doc)
    status, reply = w.post(f"{django_url}/resend", body, headers)
    assert (status, reply["stored"]) == (200, 1)  # CSRF middleware on: the view is exempt
    assert w.post(f"{django_url}/resend", body, headers)[1]["error"] == "replayed"
    status, reply = w.post(f"{django_url}/resend", body.replace(b"@", b"@x", 1), headers)
    assert status == 401
    assert w.post(f"{django_url}/postmark", b"{}")[0] == 404
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(events)).scalar_one() == 1
