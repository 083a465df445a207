"""Brevo's HTTP API (``brevo://API_KEY``): ``POST /v3/smtp/email``.

Brevo deduplicates on ``headers.idempotencyKey``, which must be a UUID: the row's key
is turned into one deterministically (UUID version 5 in a mailout namespace), so
every attempt of a message carries the same UUID. Brevo's documentation gives the
key's lifetime as 15 minutes in one place and 30 in another; mailout assumes 15
(:data:`DEDUPE_WINDOW`). Brevo replaces the Message-ID, so it is not sent; the
``messageId`` Brevo answers with is stored instead.

Limits of the API, reported as a failed message with a clear reason rather than
sent wrong: one Reply-To address only (``reply_to_unsupported``) and no inline
(``cid:``) parts (``inline_unsupported``).

Classification: 2xx sent; 401 (``unauthorized``), 402 (``not_enough_credits``) and
403 (``permission_denied``) pause; 429 and 5xx retry, honouring Retry-After; 400
(``invalid_parameter``, ``missing_parameter``...) fails. ``mailout check`` reads
``GET /v3/account``.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from email.header import Header
from typing import Any, Final

import httpx

from mailout.message.envelope import Envelope
from mailout.models import Mailbox
from mailout.transports.base import CheckResult, Decision, SendResult
from mailout.transports.http import (
    STAGE,
    ApiReply,
    ApiRequest,
    Unsendable,
    addressed,
    b64,
    by_status,
    check_by_status,
    message_of,
    no_crlf,
    retry_after,
)
from mailout.transports.providers import ProviderUrl, api_key

DEFAULT_ENDPOINT: Final = "https://api.brevo.com"
DEDUPE_WINDOW: Final = 15 * 60.0  # the shorter of the two lifetimes Brevo documents
KEY_NAMESPACE: Final = uuid.UUID("5f6d0b8e-4c1a-5d37-9a55-6d61696c6f75")  # mailout's own
NOT_ENOUGH_CREDITS: Final = 402  # Brevo: the account cannot pay for the send
TOO_MANY_REQUESTS: Final = 429
_SPECIALS = frozenset(',;<>"@()[]:\\')  # a display name holding one breaks Brevo's header


def key_uuid(key: str) -> str:
    """The UUID Brevo receives for mailout's idempotency ``key``: the same every time."""
    return str(uuid.uuid5(KEY_NAMESPACE, key))


class BrevoProvider:
    """The Brevo hooks for :class:`~mailout.transports.http.HttpTransport`."""

    name = "brevo"
    dedupe_window: float | None = DEDUPE_WINDOW

    def __init__(self, api_key: str) -> None:
        self._key = api_key
        self.secrets: tuple[str, ...] = (api_key,)

    def build(self, envelope: Envelope) -> ApiRequest:
        if len(envelope.reply_to) > 1:
            raise Unsendable("reply_to_unsupported", "Brevo takes one Reply-To address")
        if any(a.inline for a in envelope.attachments):
            raise Unsendable("inline_unsupported", "Brevo's API has no inline (cid:) parts")
        to, cc, bcc = addressed(envelope)
        body: dict[str, Any] = {
            "sender": _person(envelope.sender),
            "to": [_person(m) for m in to],
            "subject": envelope.subject,
        }
        if cc:
            body["cc"] = [_person(m) for m in cc]
        if bcc:
            body["bcc"] = [_person(m) for m in bcc]
        if envelope.reply_to:
            body["replyTo"] = _person(envelope.reply_to[0])
        if envelope.html is not None:
            body["htmlContent"] = envelope.html
        if envelope.text is not None:
            body["textContent"] = envelope.text
        headers = {n: _encoded(no_crlf(n, v)) for n, v in envelope.headers}
        headers["idempotencyKey"] = key_uuid(envelope.idempotency_key)
        body["headers"] = headers
        if envelope.attachments:
            body["attachment"] = [{"name": a.filename, "content": b64(a.content)}
                                  for a in envelope.attachments]
        return ApiRequest("POST", "/v3/smtp/email", json=body)

    def sign(self, request: httpx.Request) -> None:
        request.headers["api-key"] = self._key

    def classify(self, reply: ApiReply, envelope: Envelope) -> SendResult:
        body = reply.json_object()
        code = body.get("code") if isinstance(body.get("code"), str) else None
        text = message_of(body, "message")
        if code:
            text = f"{code}: {text or ''}".rstrip(": ")
        if reply.ok:
            provider_id = body.get("messageId")
            return SendResult(Decision.SENT, "accepted", stage=STAGE, code=reply.status,
                              provider_id=provider_id if isinstance(provider_id, str) else None)
        if reply.status == NOT_ENOUGH_CREDITS:
            return SendResult(Decision.PAUSE, "not_enough_credits", stage=STAGE,
                              code=reply.status, text=text)
        result = by_status(reply, text)
        if result.retry_after is None and reply.status == TOO_MANY_REQUESTS:
            # Brevo sends no Retry-After: its own header says when the limit resets.
            wait = retry_after(reply.headers.get("x-sib-ratelimit-reset"))
            return dataclasses.replace(result, retry_after=wait)
        return result

    def check_request(self) -> ApiRequest:
        return ApiRequest("GET", "/v3/account")

    def check_verdict(self, reply: ApiReply) -> CheckResult:
        return check_by_status(reply, "GET /v3/account")


def _person(m: Mailbox) -> dict[str, str]:
    # Brevo writes the name into the header as given: a comma split it into two
    # addresses and non-ASCII was mangled. An encoded word is safe as it is.
    if not m.name:
        return {"email": m.address}
    plain = m.name.isascii() and not _SPECIALS.intersection(m.name)
    return {"email": m.address, "name": m.name if plain else _encoded(m.name, always=True)}


def _encoded(value: str, *, always: bool = False) -> str:
    """``value`` as RFC 2047 encoded words when it is not plain ASCII (or ``always``)."""
    if value.isascii() and not always:
        return value
    return Header(value, "utf-8").encode()


def from_url(address: str, query: Mapping[str, str], setting: str) -> ProviderUrl:
    """``brevo://KEY``."""
    key = api_key(address, "brevo", setting)
    return ProviderUrl("brevo://****", DEFAULT_ENDPOINT, lambda: BrevoProvider(key))
