"""A fake of SendGrid's ``POST /v3/mail/send`` and ``GET /v3/scopes``.

Checks ``Authorization: Bearer KEY`` (401 otherwise), documented fields only, one or
more personalizations with ``to``, ``from``, ``subject`` (here, not per
personalization) and ``content`` with text/plain before text/html, attachments with
base64 content and a disposition. Answers 202 with an empty body and
``X-Message-Id``, as SendGrid does.
"""

from __future__ import annotations

import base64
import binascii

from bench.support.providers.server import DROP, Delivery, FakeProvider, Reply, Request

FIELDS = {"personalizations", "from", "reply_to", "reply_to_list", "subject", "content",
          "attachments", "template_id", "headers", "categories", "custom_args", "send_at",
          "batch_id", "asm", "ip_pool_name", "mail_settings", "tracking_settings"}


def error(status: int, message: str, **headers: str) -> Reply:
    return Reply(status, {"errors": [{"message": message, "field": None, "help": None}]},
                 headers)


class FakeSendGrid(FakeProvider):
    name = "sendgrid"

    def __init__(self, secret: str = "SG.test-key.0123456789abcdef") -> None:
        super().__init__(secret)

    def handle(self, request: Request) -> Reply | object:
        if request.headers.get("authorization") != f"Bearer {self.secret}":
            return error(401, "The provided authorization grant is invalid, expired, or "
                              "revoked")
        if (request.method, request.path) == ("GET", "/v3/scopes"):
            return Reply(200, {"scopes": ["mail.send", "scopes.read"]})
        if (request.method, request.path) != ("POST", "/v3/mail/send"):
            return error(404, "not found")
        problem = self._check(request)
        if problem:
            self.violation(problem)
            return error(400, problem)
        body = request.json()
        [people] = body["personalizations"]
        recipients = tuple(p["email"].lower() for f in ("to", "cc", "bcc")
                           for p in people.get(f, []))
        fault = self.fault(recipients)
        if fault == "refuse":
            return error(400, "Does not contain a valid address.")
        if fault == "defer":
            return error(429, "too many requests", **{"Retry-After": "5"})
        provider_id = self.next_id()
        key = body.get("custom_args", {}).get("mailout_key")
        self.accept(Delivery(None, recipients, None, dict(body.get("headers") or {}), body,
                             provider_id))
        del key
        return DROP if fault == "lose" else Reply(202, b"", {"X-Message-Id": provider_id})

    def _check(self, request: Request) -> str | None:
        if not request.headers.get("content-type", "").startswith("application/json"):
            return "Content-Type must be application/json"
        body = request.json()
        unknown = set(body) - FIELDS
        if unknown:
            return f"unknown fields {sorted(unknown)}"
        people = body.get("personalizations")
        if not isinstance(people, list) or not people or not people[0].get("to"):
            return "personalizations[0].to is required"
        for person in people:
            for f in ("to", "cc", "bcc"):
                if not all(set(p) <= {"email", "name"} for p in person.get(f, [])):
                    return f"{f} must be a list of {{email, name}}"
        if not isinstance(body.get("from"), dict) or not body.get("subject"):
            return "from and subject are required"
        types = [c.get("type") for c in body.get("content", [])]
        if not types or (types != sorted(types, key=lambda t: t != "text/plain")):
            return "content is required, text/plain first"
        for item in body.get("attachments", []):
            if not {"content", "filename"} <= set(item) <= {
                    "content", "type", "filename", "disposition", "content_id"}:
                return f"bad attachment fields {sorted(item)}"
            if item.get("disposition") == "inline" and not item.get("content_id"):
                return "an inline attachment needs a content_id"
            try:
                base64.b64decode(item["content"], validate=True)
            except binascii.Error:
                return "attachment content must be base64"
        return None
