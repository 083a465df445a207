"""SendGrid's HTTP API (``sendgrid://API_KEY``): ``POST /v3/mail/send``.

SendGrid documents no idempotency key: a resend after an unknown outcome can arrive
twice, and the worker follows ``MAILOUT_ON_UNKNOWN``. The row's key travels as a
custom argument (``custom_args.mailout_key``), which SendGrid's event webhooks echo
back. SendGrid answers 202 with an empty body and the message id in the
``X-Message-Id`` header; the Message-ID header is SendGrid's own.

Classification: 202 sent; 401/403 pause; 429 and 5xx retry, honouring Retry-After
(SendGrid's rate-limit reset header is used when Retry-After is absent); 400 and 413
fail. ``mailout check`` reads ``GET /v3/scopes`` and requires ``mail.send`` among them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

import httpx

from mailout.message.envelope import Envelope
from mailout.models import Attachment, Mailbox
from mailout.transports.base import CheckResult, Decision, SendResult
from mailout.transports.http import (
    ApiReply,
    ApiRequest,
    addressed,
    b64,
    by_status,
    check_by_status,
    no_crlf,
    retry_after,
)
from mailout.transports.providers import ProviderUrl, api_key

DEFAULT_ENDPOINT: Final = "https://api.sendgrid.com"
SEND_SCOPE: Final = "mail.send"


class SendGridProvider:
    """The SendGrid hooks for :class:`~mailout.transports.http.HttpTransport`."""

    name = "sendgrid"
    dedupe_window: float | None = None  # no idempotency key in SendGrid's API

    def __init__(self, api_key: str) -> None:
        self._key = api_key
        self.secrets: tuple[str, ...] = (api_key,)

    def build(self, envelope: Envelope) -> ApiRequest:
        to, cc, bcc = addressed(envelope)
        people: dict[str, Any] = {"to": [_person(m) for m in to]}
        if cc:
            people["cc"] = [_person(m) for m in cc]
        if bcc:
            people["bcc"] = [_person(m) for m in bcc]
        content = []
        if envelope.text is not None:
            content.append({"type": "text/plain", "value": envelope.text})
        if envelope.html is not None:
            content.append({"type": "text/html", "value": envelope.html})
        body: dict[str, Any] = {
            "personalizations": [people],
            "from": _person(envelope.sender),
            "subject": envelope.subject,
            "content": content,
            "custom_args": {"mailout_key": envelope.idempotency_key},
        }
        if len(envelope.reply_to) == 1:
            body["reply_to"] = _person(envelope.reply_to[0])
        elif envelope.reply_to:
            body["reply_to_list"] = [_person(m) for m in envelope.reply_to]
        if envelope.headers:
            body["headers"] = {n: no_crlf(n, v) for n, v in envelope.headers}
        if envelope.attachments:
            body["attachments"] = [_attachment(a) for a in envelope.attachments]
        return ApiRequest("POST", "/v3/mail/send", json=body)

    def sign(self, request: httpx.Request) -> None:
        request.headers["Authorization"] = f"Bearer {self._key}"

    def classify(self, reply: ApiReply, envelope: Envelope) -> SendResult:
        errors = reply.json_object().get("errors")
        text = None
        if isinstance(errors, list) and errors:
            text = "; ".join(str(e.get("message", "")) for e in errors if isinstance(e, dict))
        result = by_status(reply, text, provider_id=reply.headers.get("x-message-id"))
        if result.decision is Decision.RETRY and result.retry_after is None:
            reset = reply.headers.get("x-ratelimit-reset")  # epoch seconds
            if reset and reset.isdigit():
                wait = retry_after(str(int(reset) - int(time.time())))
                result = replace(result, retry_after=wait)
        return result

    def check_request(self) -> ApiRequest:
        return ApiRequest("GET", "/v3/scopes")

    def check_verdict(self, reply: ApiReply) -> CheckResult:
        verdict = check_by_status(reply, "GET /v3/scopes")
        scopes = reply.json_object().get("scopes")
        if verdict.ok and isinstance(scopes, list) and SEND_SCOPE not in scopes:
            return CheckResult(False, f"the API key works but lacks the {SEND_SCOPE} scope")
        return verdict


def _person(m: Mailbox) -> dict[str, str]:
    return {"email": m.address, "name": m.name} if m.name else {"email": m.address}


def _attachment(a: Attachment) -> dict[str, str]:
    item = {"content": b64(a.content), "type": a.content_type, "filename": a.filename,
            "disposition": "inline" if a.inline else "attachment"}
    if a.inline and a.cid:
        item["content_id"] = a.cid
    return item


def from_url(address: str, query: Mapping[str, str], setting: str) -> ProviderUrl:
    """``sendgrid://KEY``."""
    key = api_key(address, "sendgrid", setting)
    return ProviderUrl("sendgrid://****", DEFAULT_ENDPOINT, lambda: SendGridProvider(key))
