"""The webhook receivers as one ASGI app (Starlette).

Mount it in FastAPI or Starlette::

    from mailout.webhooks.app import create_app
    app.mount("/webhooks", create_app(engine))      # POST /webhooks/resend, ...

``create_app`` reads the provider secrets from the environment (see
:mod:`mailout.webhooks.settings`) unless given settings. Each provider is
``POST /{provider}``; ``GET /healthz`` answers without touching the database and
``GET /metrics`` serves the webhook counters for Prometheus, to loopback clients or
with ``MAILOUT_WEBHOOK_METRICS_TOKEN`` as a Bearer token (404 otherwise). Bodies are read up to
``MAILOUT_WEBHOOK_MAX_BYTES`` and refused (413) past it without reading the rest.
Verification and storage run in a worker thread, off the event loop.
"""

from __future__ import annotations

import hmac

from sqlalchemy import Engine
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route

from mailout.support.hosts import is_loopback
from mailout.webhooks.handler import WebhookHandler
from mailout.webhooks.settings import WebhookSettings, load

PROVIDER_PATH = "/{provider:str}"


def create_app(engine: Engine | None = None, settings: WebhookSettings | None = None, *,
               handler: WebhookHandler | None = None) -> Starlette:
    """The receivers' app. Give an ``engine`` (and optionally ``settings``), or a
    ready ``handler``. The handler is on ``app.state.handler``."""
    if handler is None:
        if engine is None:
            raise TypeError("create_app needs an engine or a handler")
        handler = WebhookHandler(engine, settings or load())
    ready = handler

    async def receive(request: Request) -> Response:
        provider = request.path_params["provider"]
        if provider not in ready.receivers:
            return JSONResponse({"error": "not_found",
                                 "reason": "no such webhook endpoint is configured"}, 404)
        body = await _read_body(request, ready.settings.max_bytes)
        if body is None:
            reply = ready.too_large(provider)
        else:
            reply = await run_in_threadpool(ready.handle, provider, dict(request.headers),
                                            body, dict(request.query_params))
        return JSONResponse(reply.body, reply.status)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    app = Starlette(routes=[
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", _metrics_for(handler), methods=["GET"]),
        Route(PROVIDER_PATH, receive, methods=["POST"]),
    ])
    app.state.handler = handler
    return app


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The body, or None once it grows past ``limit`` (the rest is not read)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def standalone_app(engine: Engine, settings: WebhookSettings) -> Starlette:
    """What ``mailout webhooks serve`` runs: the receivers under ``/webhooks``, with
    ``/healthz`` and ``/metrics`` at the root too."""
    inner = create_app(engine, settings)
    handler: WebhookHandler = inner.state.handler
    outer = Starlette(routes=[
        Route("/healthz", _ok, methods=["GET"]),
        Route("/metrics", _metrics_for(handler), methods=["GET"]),
        Mount("/webhooks", app=inner),
    ])
    outer.state.handler = handler
    return outer


async def _ok(request: Request) -> Response:
    return PlainTextResponse("ok\n")


def _metrics_for(handler: WebhookHandler):  # type: ignore[no-untyped-def]  # a Starlette endpoint
    async def metrics(request: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        if not _may_scrape(request, handler.settings.metrics_token):
            return PlainTextResponse("not found\n", 404)
        return Response(generate_latest(handler.registry), media_type=CONTENT_TYPE_LATEST)
    return metrics


def _may_scrape(request: Request, token: str | None) -> bool:
    """The receivers face the internet; their counters do not: a scrape needs the
    metrics token, or (with none set) to come from this machine."""
    if token is None:
        return request.client is not None and is_loopback(request.client.host)
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                              token.encode())
