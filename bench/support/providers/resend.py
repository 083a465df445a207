"""A fake of Resend's ``POST /emails`` and ``GET /domains``, with its key dedupe.

Checks: ``Authorization: Bearer KEY`` (401 ``missing_api_key`` without, 403
``invalid_api_key`` for a wrong key), a JSON body with only documented fields, a
``from``, ``to`` and ``subject``, text or html, attachments with base64 content.
Dedupe as documented: a repeated ``Idempotency-Key`` within the window with the same
body returns the first answer and sends nothing; with another body, 409
``invalid_idempotent_request``. ``restricted=True`` plays a sending-only key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time
from typing import Any

from bench.support.providers.server import DROP, Delivery, FakeProvider, Reply, Request

FIELDS = {"from", "to", "subject", "bcc", "cc", "scheduled_at", "reply_to", "html", "text",
          "headers", "attachments", "tags"}
ATTACHMENT_FIELDS = {"content", "filename", "path", "content_type", "content_id"}


def error(status: int, name: str, message: str, **headers: str) -> Reply:
    return Reply(status, {"statusCode": status, "name": name, "message": message}, headers)


class FakeResend(FakeProvider):
    name = "resend"

    def __init__(self, secret: str = "re_test_0123456789abcdef", *, window: float = 86400.0,
                 dedupe: bool = True, restricted: bool = False) -> None:
        super().__init__(secret)
        self.window = window
        self.dedupe = dedupe
        self.restricted = restricted
        self.keys: dict[str, tuple[float, str, Reply]] = {}
        self.dedupe_hits = 0
        self.conflicts = 0

    def handle(self, request: Request) -> Reply | object:
        auth = request.headers.get("authorization", "")
        if not auth.startswith("Bearer "):
            return error(401, "missing_api_key", "Missing API key in the authorization header.")
        if auth != f"Bearer {self.secret}":
            return error(403, "invalid_api_key", "API key is invalid")
        if (request.method, request.path) == ("GET", "/domains"):
            if self.restricted:
                return error(401, "restricted_api_key",
                             "This API key is restricted to only send emails")
            return Reply(200, {"object": "list", "data": []})
        if (request.method, request.path) != ("POST", "/emails"):
            return error(404, "not_found", "The requested endpoint does not exist.")
        problem = self._check(request)
        if problem:
            self.violation(problem)
            return error(422, "validation_error", problem)
        body = request.json()
        key = request.headers.get("idempotency-key")
        digest = hashlib.sha256(request.body).hexdigest()
        if key and self.dedupe:
            with self.lock:
                seen = self.keys.get(key)
                if seen and time.monotonic() - seen[0] < self.window:
                    if seen[1] != digest:
                        self.conflicts += 1
                        return error(409, "invalid_idempotent_request", "Same idempotency key "
                                     "used with a different request payload.")
                    self.dedupe_hits += 1
                    return seen[2]
        recipients = tuple(_as_list(body.get("to")) + _as_list(body.get("cc"))
                           + _as_list(body.get("bcc")))
        bare = tuple(_bare(r) for r in recipients)
        fault = self.fault(bare)
        if fault == "refuse":
            return error(422, "validation_error", f"Invalid `to` field: {bare[0]}")
        if fault == "defer":
            return error(429, "rate_limit_exceeded", "Too many requests.", **{"Retry-After": "2"})
        provider_id = self.next_id()
        reply = Reply(200, {"id": provider_id})
        headers = dict(body.get("headers") or {})
        if key and self.dedupe:
            with self.lock:
                self.keys[key] = (time.monotonic(), digest, reply)
        self.accept(Delivery(headers.get("Message-ID"), bare, key, headers, body, provider_id))
        return DROP if fault == "lose" else reply

    def _check(self, request: Request) -> str | None:
        if not request.headers.get("content-type", "").startswith("application/json"):
            return "Content-Type must be application/json"
        try:
            body = request.json()
        except ValueError:
            return "the body is not JSON"
        if not isinstance(body, dict):
            return "the body is not a JSON object"
        unknown = set(body) - FIELDS
        if unknown:
            return f"unknown fields {sorted(unknown)}"
        for name in ("from", "to", "subject"):
            if not body.get(name):
                return f"Missing `{name}` field."
        if "text" not in body and "html" not in body:
            return "Missing `html` or `text` field."
        key = request.headers.get("idempotency-key")
        if key is not None and not 1 <= len(key) <= 256:
            return "Idempotency-Key must be 1 to 256 characters"
        headers = body.get("headers", {})
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            return "`headers` must be an object of strings"
        for item in body.get("attachments", []):
            if set(item) - ATTACHMENT_FIELDS or "filename" not in item:
                return f"bad attachment fields {sorted(item)}"
            try:
                base64.b64decode(item["content"], validate=True)
            except (KeyError, binascii.Error):
                return "attachment content must be base64"
        return None


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _bare(mailbox: str) -> str:
    return mailbox.rsplit("<", 1)[-1].rstrip(">").strip().lower()
