"""A fake of Brevo's ``POST /v3/smtp/email`` and ``GET /v3/account``, with key dedupe.

Checks the ``api-key`` header (401 ``unauthorized`` otherwise), documented fields
only, ``sender``/``to`` as ``{email, name}`` objects, one ``replyTo`` object,
attachments as ``{name, content}``, and that ``headers.idempotencyKey`` is a UUID.
A repeated key within the window (15 minutes, as Brevo's changelog says) is processed
once: the first answer comes back and nothing is sent.
"""

from __future__ import annotations

import base64
import binascii
import time
import uuid

from bench.support.providers.server import DROP, Delivery, FakeProvider, Reply, Request

FIELDS = {"sender", "to", "cc", "bcc", "replyTo", "subject", "htmlContent", "textContent",
          "headers", "attachment", "templateId", "params", "tags", "scheduledAt",
          "messageVersions", "batchId"}


def error(status: int, code: str, message: str, **headers: str) -> Reply:
    return Reply(status, {"code": code, "message": message}, headers)


class FakeBrevo(FakeProvider):
    name = "brevo"

    def __init__(self, secret: str = "xkeysib-0123456789abcdef-TEST", *,
                 window: float = 900.0) -> None:
        super().__init__(secret)
        self.window = window
        self.keys: dict[str, tuple[float, Reply]] = {}
        self.dedupe_hits = 0

    def handle(self, request: Request) -> Reply | object:
        if request.headers.get("api-key") != self.secret:
            return error(401, "unauthorized", "Key not found")
        if (request.method, request.path) == ("GET", "/v3/account"):
            return Reply(200, {"email": "ops@example.com", "plan": []})
        if (request.method, request.path) != ("POST", "/v3/smtp/email"):
            return error(404, "not_found", "Not found")
        problem = self._check(request)
        if problem:
            self.violation(problem)
            return error(400, "invalid_parameter", problem)
        body = request.json()
        headers = dict(body.get("headers") or {})
        key = headers.pop("idempotencyKey", None)
        if key:
            with self.lock:
                seen = self.keys.get(key)
                if seen and time.monotonic() - seen[0] < self.window:
                    self.dedupe_hits += 1
                    return seen[1]
        recipients = tuple(p["email"].lower() for f in ("to", "cc", "bcc")
                           for p in body.get(f, []))
        fault = self.fault(recipients)
        if fault == "refuse":
            return error(400, "invalid_parameter", f"email is not valid in to: {recipients[0]}")
        if fault == "defer":
            return error(429, "too_many_requests", "Too many requests", **{"Retry-After": "4"})
        provider_id = f"<{self.next_id()}@smtp-relay.mailin.fr>"
        reply = Reply(201, {"messageId": provider_id})
        if key:
            with self.lock:
                self.keys[key] = (time.monotonic(), reply)
        self.accept(Delivery(None, recipients, key, headers, body, provider_id))
        return DROP if fault == "lose" else reply

    def _check(self, request: Request) -> str | None:
        if not request.headers.get("content-type", "").startswith("application/json"):
            return "Content-Type must be application/json"
        body = request.json()
        unknown = set(body) - FIELDS
        if unknown:
            return f"unknown fields {sorted(unknown)}"
        if not isinstance(body.get("sender"), dict) or "email" not in body["sender"]:
            return "sender is missing"
        for f in ("to", "cc", "bcc"):
            people = body.get(f, [])
            if f == "to" and not people:
                return "to is missing"
            if not all(isinstance(p, dict) and set(p) <= {"email", "name"} for p in people):
                return f"{f} must be a list of {{email, name}}"
        if "replyTo" in body and not isinstance(body["replyTo"], dict):
            return "replyTo must be one {email, name} object"
        if not body.get("subject") or not (body.get("htmlContent") or body.get("textContent")):
            return "subject and htmlContent or textContent are required"
        key = (body.get("headers") or {}).get("idempotencyKey")
        if key is not None:
            try:
                uuid.UUID(key)
            except ValueError:
                return "idempotencyKey must be a UUID"
        for item in body.get("attachment", []):
            if set(item) != {"name", "content"}:
                return f"bad attachment fields {sorted(item)}"
            try:
                base64.b64decode(item["content"], validate=True)
            except binascii.Error:
                return "attachment content must be base64"
        return None
