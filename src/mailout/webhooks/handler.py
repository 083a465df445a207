"""The framework-neutral webhook handler: one provider's request in, an HTTP reply out.

For each request: find the provider's receiver (404 if it is not configured), refuse
an oversized body (413), verify and parse (401/400 on failure, nothing stored), then
store the events, link them and suppress in one transaction together with the
delivery's replay nonce (400 ``replayed`` if the nonce was seen). A database failure
answers 503 so that the provider retries later. The reply body is a small JSON
object; logs name the provider, the outcome and counts, never the body, a header
or a secret.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from mailout.db.engine import immediate
from mailout.db.webhook_nonces import prune_nonces
from mailout.feedback.ingest import Replayed, Result, ingest
from mailout.feedback.rate_alert import RateMonitor, sender_rejected_alert
from mailout.support.alerts import Alerts
from mailout.webhooks import base
from mailout.webhooks.base import Receiver, Request, WebhookError
from mailout.webhooks.settings import WebhookSettings, build_receivers

log = logging.getLogger(__name__)

PRUNE_EVERY_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class Reply:
    """What to answer: an HTTP status and a JSON body."""

    status: int
    body: dict[str, Any]


class WebhookHandler:
    """Verifies, stores and answers; thread-safe (the ASGI app calls it from a pool).

    ``registry`` holds the counters ``mailout_webhook_requests_total{provider,result}``
    and ``mailout_events_total{provider,type,matched}``.
    """

    def __init__(self, engine: Engine, settings: WebhookSettings, *,
                 receivers: Mapping[str, Receiver] | None = None,
                 clock: Callable[[], float] = time.time,
                 alerts: Alerts | None = None) -> None:
        self.engine = engine
        self.settings = settings
        self.receivers = dict(receivers) if receivers is not None else build_receivers(settings)
        self._clock = clock
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("mailout_webhook_requests", "Webhook requests by provider "
                                "and result (ok, or the refusal code).",
                                ["provider", "result"], registry=self.registry)
        self.events = Counter("mailout_events", "Delivery events stored, by provider, type "
                              "and whether they matched an outbox row.",
                              ["provider", "type", "matched"], registry=self.registry)
        self.monitor = RateMonitor(engine, settings, alerts or Alerts(
            webhook_url=settings.alert_webhook))
        self._prune_lock = threading.Lock()
        self._pruned_at = float("-inf")

    def handle(self, provider: str, headers: Mapping[str, str], body: bytes,
               query: Mapping[str, str] | None = None) -> Reply:
        """Answer one request. Never raises."""
        receiver = self.receivers.get(provider)
        if receiver is None:
            return Reply(404, {"error": "not_found",
                               "reason": "no such webhook endpoint is configured"})
        try:
            reply = self._handle(provider, receiver, headers, body, query or {})
        except WebhookError as exc:
            log.warning("webhook %s refused: %s %s", provider, exc.status, exc.code,
                        extra={"event": "webhook_refused", "provider": provider,
                               "status": exc.status, "error": exc.code})
            reply = Reply(exc.status, {"error": exc.code, "reason": exc.reason})
        except SQLAlchemyError as exc:
            log.error("webhook %s: database error (%s); answered 503 for a retry",
                      provider, type(exc).__name__,
                      extra={"event": "webhook_database_error", "provider": provider,
                             "error": type(exc).__name__})
            reply = Reply(503, {"error": "unavailable", "reason": "database error, retry"})
        except Exception:  # a bug: the provider retries, the traceback (no body) is logged
            log.exception("webhook %s: unexpected error", provider,
                          extra={"event": "webhook_crashed", "provider": provider})
            reply = Reply(500, {"error": "internal", "reason": "internal error"})
        result = "ok" if reply.status < 300 else str(reply.body.get("error"))
        self.requests.labels(provider, result).inc()
        return reply

    def too_large(self, provider: str) -> Reply:
        """The 413 for a body refused while it was still being read."""
        if provider not in self.receivers:
            return self.handle(provider, {}, b"")  # the 404, as for any unknown provider
        reply = Reply(413, {"error": base.TOO_LARGE, "reason": "the body is larger than "
                            f"{self.settings.max_bytes} bytes"})
        self.requests.labels(provider, base.TOO_LARGE).inc()
        log.warning("webhook %s refused: 413 %s", provider, base.TOO_LARGE,
                    extra={"event": "webhook_refused", "provider": provider, "status": 413,
                           "error": base.TOO_LARGE})
        return reply

    def _handle(self, provider: str, receiver: Receiver, headers: Mapping[str, str],
                body: bytes, query: Mapping[str, str]) -> Reply:
        if len(body) > self.settings.max_bytes:
            raise WebhookError(413, base.TOO_LARGE,
                               f"the body is larger than {self.settings.max_bytes} bytes")
        request = Request({k.lower(): v for k, v in headers.items()}, body, query)
        parsed = receiver.receive(request, self._clock())
        nonce = (provider, parsed.nonce) if parsed.nonce else None
        try:
            with immediate(self.engine) as conn:  # SQLite: take the write lock up front
                result = ingest(conn, parsed.events, self.settings.policy, nonce)
        except Replayed:
            raise WebhookError(400, base.REPLAYED, "this signed delivery was already "
                               "received") from None
        self._count(result)
        if (alert := sender_rejected_alert(result.sender_rejected, provider)) is not None:
            self.monitor.alerts.fire(alert)
        self._housekeeping()
        if result.stored or parsed.ignored:
            log.info("webhook %s: %d stored, %d duplicate, %d unmatched, %d ignored, "
                     "%d suppressed", provider, result.stored, result.duplicates,
                     result.unmatched, parsed.ignored, len(result.suppressed),
                     extra={"event": "webhook_ingested", "provider": provider,
                            "stored": result.stored, "duplicates": result.duplicates,
                            "unmatched": result.unmatched, "ignored": parsed.ignored,
                            "suppressed": len(result.suppressed)})
        return Reply(200, {"stored": result.stored, "duplicates": result.duplicates,
                           "matched": result.matched, "unmatched": result.unmatched,
                           "ignored": parsed.ignored, "suppressed": len(result.suppressed),
                           **(parsed.reply or {})})

    def _count(self, result: Result) -> None:
        for event, matched in result.stored_events:
            self.events.labels(event.provider.value, event.type.value,
                               "yes" if matched else "no").inc()

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if now - self._pruned_at >= PRUNE_EVERY_SECONDS and self._prune_lock.acquire(False):
            try:
                self._pruned_at = now
                keep = 2 * max(self.settings.tolerance, self.settings.sns_tolerance)
                with self.engine.begin() as conn:
                    prune_nonces(conn, keep)
            except SQLAlchemyError as exc:
                log.warning("webhooks: pruning old nonces failed (%s)", type(exc).__name__,
                            extra={"event": "nonce_prune_failed", "error": type(exc).__name__})
            finally:
                self._prune_lock.release()
        self.monitor.maybe_check()
