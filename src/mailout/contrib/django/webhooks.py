"""The webhook receivers as a Django view, for projects that run Django, not ASGI.

::

    # urls.py
    from mailout.contrib.django.webhooks import webhook_view
    urlpatterns = [path("webhooks/<str:provider>", webhook_view())]

Django is imported when a view is built, not when this module (or the rest of
mailout) is imported. The view is CSRF-exempt (providers cannot send a token; the
signatures are the protection), accepts POST only, and runs the same handler as the
ASGI app. The engine comes from ``MAILOUT_DATABASE_URL`` unless one is given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from sqlalchemy import Engine

from mailout.webhooks.handler import WebhookHandler
from mailout.webhooks.settings import WebhookSettings, load


def webhook_view(engine: Engine | None = None, settings: WebhookSettings | None = None, *,
                 handler: WebhookHandler | None = None) -> Callable[..., Any]:
    """A Django view ``view(request, provider)``; build it once, at URL loading."""
    from django.http import HttpRequest, JsonResponse
    from django.views.decorators.csrf import csrf_exempt

    if handler is None:
        from mailout import db

        handler = WebhookHandler(engine or db.make_engine(), settings or load())
    ready = handler

    @csrf_exempt
    def view(request: HttpRequest, provider: str) -> JsonResponse:
        if request.method != "POST":
            return JsonResponse({"error": "method_not_allowed"}, status=405)
        declared = request.META.get("CONTENT_LENGTH") or ""
        if declared.isdigit() and int(declared) > ready.settings.max_bytes:
            reply = ready.too_large(provider)
        else:
            headers = {k.lower(): v for k, v in request.headers.items()}
            reply = ready.handle(provider, headers, request.body, dict(request.GET.items()))
        return JsonResponse(reply.body, status=reply.status)

    return cast("Callable[..., Any]", view)
