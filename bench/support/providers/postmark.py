"""A fake of Postmark's ``POST /email`` and ``GET /server``.

Checks ``X-Postmark-Server-Token`` (401 with ErrorCode 10 otherwise), ``Accept`` and
``Content-Type`` JSON, documented fields only, ``From``, ``To`` and a body, at most 50
recipients, ``Headers`` as Name/Value pairs and attachments as Name/Content/ContentType
(ContentID ``cid:...`` for inline parts). Refusal is ErrorCode 406 (inactive
recipient) with the addresses listed, as Postmark words it; deferral is HTTP 429.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from bench.support.providers.server import DROP, Delivery, FakeProvider, Reply, Request

FIELDS = {"From", "To", "Cc", "Bcc", "Subject", "Tag", "HtmlBody", "TextBody", "ReplyTo",
          "Headers", "TrackOpens", "TrackLinks", "Metadata", "Attachments", "MessageStream"}


def error(status: int, code: int, message: str, **headers: str) -> Reply:
    return Reply(status, {"ErrorCode": code, "Message": message}, headers)


class FakePostmark(FakeProvider):
    name = "postmark"

    def __init__(self, secret: str = "00000000-1111-2222-3333-444444444444") -> None:
        super().__init__(secret)

    def handle(self, request: Request) -> Reply | object:
        if request.headers.get("x-postmark-server-token") != self.secret:
            return error(401, 10, "Request does not contain a valid Server token.")
        if (request.method, request.path) == ("GET", "/server"):
            return Reply(200, {"ID": 1, "Name": "fake", "ApiTokens": ["hidden"]})
        if (request.method, request.path) != ("POST", "/email"):
            return Reply(404, b"not found")
        problem = self._check(request)
        if problem:
            self.violation(problem)
            return error(422, 300, f"Invalid email request: {problem}")
        body = request.json()
        recipients = tuple(_split(body.get("To")) + _split(body.get("Cc"))
                           + _split(body.get("Bcc")))
        fault = self.fault(recipients)
        if fault == "refuse":
            return error(422, 406, "You tried to send to recipient(s) that have been marked as "
                         f"inactive. Found inactive addresses: {recipients[0]}. Inactive "
                         "recipients are ones that have generated a hard bounce or a spam "
                         "complaint.")
        if fault == "defer":
            return Reply(429, {"ErrorCode": 429, "Message": "Rate limit exceeded"},
                         {"Retry-After": "3"})
        provider_id = self.next_id()
        headers = {h["Name"]: h["Value"] for h in body.get("Headers", [])}
        self.accept(Delivery(headers.get("Message-ID"), recipients, None, headers, body,
                             provider_id))
        if fault == "lose":
            return DROP
        return Reply(200, {"To": body["To"], "SubmittedAt": "2026-01-01T00:00:00Z",
                           "MessageID": provider_id, "ErrorCode": 0, "Message": "OK"})

    def _check(self, request: Request) -> str | None:
        if not request.headers.get("content-type", "").startswith("application/json"):
            return "Content-Type must be application/json"
        if "application/json" not in request.headers.get("accept", ""):
            return "Accept must include application/json"
        try:
            body = request.json()
        except ValueError:
            return "not JSON"
        unknown = set(body) - FIELDS
        if unknown:
            return f"unknown fields {sorted(unknown)}"
        if not body.get("From") or not body.get("To"):
            return "From and To are required"
        if not body.get("TextBody") and not body.get("HtmlBody"):
            return "Provide either email TextBody or HtmlBody or both."
        count = sum(len(_split(body.get(f))) for f in ("To", "Cc", "Bcc"))
        if count > 50:
            return "Maximum of 50 recipients allowed per email message"
        for header in body.get("Headers", []):
            if set(header) != {"Name", "Value"}:
                return "Headers must be Name/Value pairs"
        for item in body.get("Attachments", []):
            if not {"Name", "Content", "ContentType"} <= set(item) <= {
                    "Name", "Content", "ContentType", "ContentID"}:
                return f"bad attachment fields {sorted(item)}"
            try:
                base64.b64decode(item["Content"], validate=True)
            except binascii.Error:
                return "attachment Content must be base64"
            if "ContentID" in item and not item["ContentID"].startswith("cid:"):
                return "ContentID must start with cid:"
        return None


def _split(value: Any) -> list[str]:
    if not value:
        return []
    return [p.strip().rsplit("<", 1)[-1].rstrip(">").strip().lower()
            for p in str(value).split(",") if p.strip()]
