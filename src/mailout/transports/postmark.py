"""Postmark's HTTP API (``postmark://SERVER_TOKEN``): ``POST /email``.

Postmark documents no idempotency key, so a resend after an unknown outcome can
arrive twice; the worker follows ``MAILOUT_ON_UNKNOWN`` for it. The Message-ID is
carried as a custom header.

Postmark answers errors with HTTP 422 and an ``ErrorCode`` in the body; the code,
not the status, says what went wrong:

====================================  =========================================
ErrorCode                             decision
====================================  =========================================
10 (bad or missing token, HTTP 401)   pause
300, 402, 403, 409, 411 (the request) failed
406 inactive recipient                failed, with the inactive addresses listed
400, 401 (sender signature), 405,     pause: the account or sender needs fixing,
412, 413 (account may not send)       not the message
100 maintenance, HTTP 429, 5xx        retry, honouring Retry-After
====================================  =========================================

``mailout check`` reads ``GET /server`` with the same server token.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import httpx

from mailout.message.envelope import Envelope
from mailout.models import Attachment
from mailout.transports.base import CheckResult, Decision, RecipientResult, SendResult
from mailout.transports.http import (
    STAGE,
    ApiReply,
    ApiRequest,
    addressed,
    b64,
    by_status,
    check_by_status,
    no_crlf,
    retry_after,
    shown,
)
from mailout.transports.providers import ProviderUrl, api_key

DEFAULT_ENDPOINT: Final = "https://api.postmarkapp.com"
TOKEN_HEADER: Final = "X-Postmark-Server-Token"  # noqa: S105 (a header name, not a secret)
DEFAULT_STREAM: Final = "outbound"

# Postmark ErrorCode values (its API overview lists them).
BAD_TOKEN: Final = 10
MAINTENANCE: Final = 100
INVALID_REQUEST: Final = 300
SENDER_NOT_FOUND: Final = 400
SENDER_NOT_CONFIRMED: Final = 401
INVALID_JSON: Final = 402
INCOMPATIBLE_JSON: Final = 403
NOT_ALLOWED: Final = 405
INACTIVE_RECIPIENT: Final = 406
JSON_REQUIRED: Final = 409
FORBIDDEN_ATTACHMENT: Final = 411
ACCOUNT_PENDING: Final = 412
ACCOUNT_MAY_NOT_SEND: Final = 413

_FAILED: Final = {INVALID_REQUEST: "invalid_request", INVALID_JSON: "invalid_request",
                  INCOMPATIBLE_JSON: "invalid_request", JSON_REQUIRED: "invalid_request",
                  FORBIDDEN_ATTACHMENT: "forbidden_attachment"}
_PAUSE: Final = {BAD_TOKEN: "unauthorized", SENDER_NOT_FOUND: "sender_not_found",
                 SENDER_NOT_CONFIRMED: "sender_not_confirmed", NOT_ALLOWED: "not_allowed",
                 ACCOUNT_PENDING: "account_pending", ACCOUNT_MAY_NOT_SEND: "account_may_not_send"}
_ADDRESS = re.compile(r"[^\s,;:<>()\"']+@[^\s,;:<>()\"']+[^\s,;:<>()\"'.]")


class PostmarkProvider:
    """The Postmark hooks for :class:`~mailout.transports.http.HttpTransport`."""

    name = "postmark"
    dedupe_window: float | None = None  # no idempotency key in Postmark's API

    def __init__(self, token: str, *, stream: str = DEFAULT_STREAM) -> None:
        self._token = token
        self._stream = stream
        self.secrets: tuple[str, ...] = (token,)

    def build(self, envelope: Envelope) -> ApiRequest:
        to, cc, bcc = addressed(envelope)
        body: dict[str, Any] = {
            "From": str(envelope.sender),
            "To": ", ".join(shown(to)),
            "Subject": envelope.subject,
            "MessageStream": self._stream,
        }
        for name, boxes in (("Cc", cc), ("Bcc", bcc),
                            ("ReplyTo", envelope.reply_to)):
            if boxes:
                body[name] = ", ".join(shown(boxes))
        if envelope.text is not None:
            body["TextBody"] = envelope.text
        if envelope.html is not None:
            body["HtmlBody"] = envelope.html
        body["Headers"] = [{"Name": "Message-ID", "Value": envelope.message_id}] + [
            {"Name": n, "Value": no_crlf(n, v)} for n, v in envelope.headers]
        if envelope.attachments:
            body["Attachments"] = [_attachment(a) for a in envelope.attachments]
        return ApiRequest("POST", "/email", json=body)

    def sign(self, request: httpx.Request) -> None:
        request.headers[TOKEN_HEADER] = self._token

    def classify(self, reply: ApiReply, envelope: Envelope) -> SendResult:
        body = reply.json_object()
        code = body.get("ErrorCode")
        message = body.get("Message") if isinstance(body.get("Message"), str) else None
        text = f"ErrorCode {code}: {message}" if code else message
        if reply.ok and not code:
            provider_id = body.get("MessageID")
            return SendResult(Decision.SENT, "accepted", stage=STAGE, code=reply.status,
                              provider_id=provider_id if isinstance(provider_id, str) else None)
        common: dict[str, Any] = {"stage": STAGE, "code": reply.status, "text": text}
        if code == INACTIVE_RECIPIENT:
            inactive = _ADDRESS.findall(message or "")
            return SendResult(Decision.FAILED, "inactive_recipient", recipients=tuple(
                RecipientResult(a, Decision.FAILED, INACTIVE_RECIPIENT, None,
                                "inactive recipient") for a in inactive), **common)
        if isinstance(code, int) and code in _FAILED:
            return SendResult(Decision.FAILED, _FAILED[code], **common)
        if isinstance(code, int) and code in _PAUSE:
            return SendResult(Decision.PAUSE, _PAUSE[code], **common)
        if code == MAINTENANCE:
            return SendResult(Decision.RETRY, "maintenance", **common,
                              retry_after=retry_after(reply.headers.get("retry-after")))
        return by_status(reply, text)

    def check_request(self) -> ApiRequest:
        return ApiRequest("GET", "/server")

    def check_verdict(self, reply: ApiReply) -> CheckResult:
        return check_by_status(reply, "GET /server")


def _attachment(a: Attachment) -> dict[str, Any]:
    item = {"Name": a.filename, "Content": b64(a.content), "ContentType": a.content_type}
    if a.inline and a.cid:
        item["ContentID"] = f"cid:{a.cid}"
    return item


def from_url(address: str, query: Mapping[str, str], setting: str) -> ProviderUrl:
    """``postmark://TOKEN``, ``?stream=`` its message stream (default ``outbound``)."""
    token = api_key(address, "postmark", setting)
    stream = query.get("stream") or DEFAULT_STREAM
    return ProviderUrl(f"postmark://****?stream={stream}", DEFAULT_ENDPOINT,
                       lambda: PostmarkProvider(token, stream=stream))
