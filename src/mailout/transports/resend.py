"""Resend's HTTP API (``resend://API_KEY``): ``POST /emails`` with an idempotency key.

Every send carries the row's key in the ``Idempotency-Key`` header. Resend keeps a
key for 24 hours: a repeat with the same key and body returns the first answer and
sends nothing, which is what makes a resend after an unknown outcome safe inside
that window (:attr:`ResendProvider.dedupe_window`). A repeat with the same key and a
*different* body is refused (409 ``invalid_idempotent_request``): that is a failure,
never a resend, because the first body may already have been delivered.

Classification: 2xx sent (the answer's ``id`` is stored); 401/403 pause (a missing,
restricted or invalid key, or an unverified domain); 409 idempotency conflict fails,
a concurrent request with the same key retries; 429 (rate or quota) and 5xx retry,
honouring ``Retry-After``; 400/422 (validation) fail. ``mailout check`` reads
``GET /domains``: a full-access key lists them; a sending-only key is refused with
``restricted_api_key``, which still proves the key exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import httpx

from mailout.message.envelope import Envelope
from mailout.models import Attachment
from mailout.transports.base import CheckResult, Decision, SendResult
from mailout.transports.http import (
    STAGE,
    ApiReply,
    ApiRequest,
    addressed,
    b64,
    by_status,
    message_of,
    no_crlf,
    retry_after,
    shown,
)
from mailout.transports.providers import ProviderUrl, api_key

DEFAULT_ENDPOINT: Final = "https://api.resend.com"
DEDUPE_WINDOW: Final = 24 * 3600.0  # Resend keeps an idempotency key for a day
KEY_HEADER: Final = "Idempotency-Key"
IDEMPOTENCY_CONFLICT: Final = "invalid_idempotent_request"  # same key, different body
CONCURRENT_KEY: Final = "concurrent_idempotent_requests"  # same key still in flight
RESTRICTED_KEY: Final = "restricted_api_key"  # a sending-only key on another endpoint


class ResendProvider:
    """The Resend hooks for :class:`~mailout.transports.http.HttpTransport`."""

    name = "resend"
    dedupe_window: float | None = DEDUPE_WINDOW

    def __init__(self, api_key: str) -> None:
        self._key = api_key
        self.secrets: tuple[str, ...] = (api_key,)

    def build(self, envelope: Envelope) -> ApiRequest:
        to, cc, bcc = addressed(envelope)
        body: dict[str, Any] = {
            "from": str(envelope.sender),
            "to": shown(to),
            "subject": envelope.subject,
        }
        for name, boxes in (("cc", cc), ("bcc", bcc), ("reply_to", envelope.reply_to)):
            if boxes:
                body[name] = shown(boxes)
        if envelope.text is not None:
            body["text"] = envelope.text
        if envelope.html is not None:
            body["html"] = envelope.html
        headers = {"Message-ID": envelope.message_id}
        headers.update((n, no_crlf(n, v)) for n, v in envelope.headers)
        body["headers"] = headers
        if envelope.attachments:
            body["attachments"] = [_attachment(a) for a in envelope.attachments]
        return ApiRequest("POST", "/emails", json=body,
                          headers={KEY_HEADER: no_crlf(KEY_HEADER, envelope.idempotency_key)})

    def sign(self, request: httpx.Request) -> None:
        request.headers["Authorization"] = f"Bearer {self._key}"

    def classify(self, reply: ApiReply, envelope: Envelope) -> SendResult:
        body = reply.json_object()
        error = body.get("name") if isinstance(body.get("name"), str) else None
        text = message_of(body, "message")
        if error:
            text = f"{error}: {text or ''}".rstrip(": ")
        if reply.ok:
            provider_id = body.get("id")
            if not isinstance(provider_id, str) or not provider_id:
                # Accepted, but the answer is not Resend's: keep what we know.
                return SendResult(Decision.SENT, "accepted_without_id", stage=STAGE,
                                  code=reply.status, text=text)
            return SendResult(Decision.SENT, "accepted", provider_id=provider_id,
                              stage=STAGE, code=reply.status)
        if reply.status == 409 and error == IDEMPOTENCY_CONFLICT:
            return SendResult(Decision.FAILED, "idempotency_conflict", stage=STAGE,
                              code=reply.status, text=text,
                              detail="the key was used with a different message")
        if reply.status == 409 and error == CONCURRENT_KEY:
            return SendResult(Decision.RETRY, "key_in_flight", stage=STAGE, code=reply.status,
                              text=text, retry_after=retry_after(
                                  reply.headers.get("retry-after")))
        return by_status(reply, text)

    def check_request(self) -> ApiRequest:
        return ApiRequest("GET", "/domains")

    def check_verdict(self, reply: ApiReply) -> CheckResult:
        error = reply.json_object().get("name")
        if reply.ok:
            return CheckResult(True, "full-access API key accepted (GET /domains)")
        if reply.status == 401 and error == RESTRICTED_KEY:
            return CheckResult(True, "sending-only API key accepted (GET /domains is "
                                     "refused to it, as documented)")
        if reply.status in (401, 403):
            return CheckResult(False, f"API key refused (HTTP {reply.status} {error or ''})"
                                      .rstrip() + ": check the key in MAILOUT_TRANSPORT")
        return CheckResult(False, f"GET /domains answered HTTP {reply.status}")


def _attachment(a: Attachment) -> dict[str, Any]:
    item = {"filename": a.filename, "content": b64(a.content), "content_type": a.content_type}
    if a.inline and a.cid:
        item["content_id"] = a.cid
    return item


def from_url(address: str, query: Mapping[str, str], setting: str) -> ProviderUrl:
    """``resend://KEY``."""
    key = api_key(address, "resend", setting)
    return ProviderUrl("resend://****", DEFAULT_ENDPOINT, lambda: ResendProvider(key))
