"""Mailgun's HTTP API (``mailgun://API_KEY@DOMAIN``): ``POST /v3/DOMAIN/messages``.

A form-encoded request (multipart when there are files), basic auth as ``api`` with
the key. ``?region=eu`` uses the EU base URL. Mailgun documents no idempotency key:
the worker follows ``MAILOUT_ON_UNKNOWN`` after an unknown outcome. The Message-ID is
carried as ``h:Message-Id``, extra headers as ``h:NAME``, the row's key as the custom
variable ``v:mailout-key`` (echoed by Mailgun's webhooks). Inline parts are sent as
``inline`` files named by their Content-ID, which is how Mailgun matches ``cid:``.

Classification: 2xx sent (``id`` stored); 401 and 403 pause, and so do 402 (the
account) and 404 (an unknown domain: our configuration); 429 and 5xx retry,
honouring Retry-After; 400 and 413 fail. ``mailout check`` reads
``GET /v3/domains/DOMAIN``.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Final
from urllib.parse import unquote

import httpx

from mailout.exceptions import ConfigError
from mailout.message.envelope import Envelope
from mailout.models import Attachment
from mailout.transports.base import CheckResult, Decision, SendResult
from mailout.transports.http import (
    STAGE,
    ApiReply,
    ApiRequest,
    addressed,
    by_status,
    check_by_status,
    message_of,
    no_crlf,
    shown,
)
from mailout.transports.providers import ProviderUrl

PAYMENT_REQUIRED: Final = 402
DOMAIN_NOT_FOUND: Final = 404


class MailgunProvider:
    """The Mailgun hooks for :class:`~mailout.transports.http.HttpTransport`."""

    name = "mailgun"
    dedupe_window: float | None = None  # no idempotency key in Mailgun's API

    def __init__(self, api_key: str, domain: str) -> None:
        self._auth = httpx.BasicAuth("api", api_key)
        self.domain = domain
        # The key, and the Basic credentials built from it: an error that echoes the
        # request's Authorization header (a proxy's, a debugging server's) carries those.
        basic = base64.b64encode(f"api:{api_key}".encode()).decode()
        self.secrets: tuple[str, ...] = (api_key, basic, basic.rstrip("="))

    def build(self, envelope: Envelope) -> ApiRequest:
        to, cc, bcc = addressed(envelope)
        form: list[tuple[str, str]] = [("from", str(envelope.sender))]
        form += [("to", m) for m in shown(to)]
        form += [("cc", m) for m in shown(cc)]
        form += [("bcc", m) for m in shown(bcc)]
        form.append(("subject", envelope.subject))
        if envelope.text is not None:
            form.append(("text", envelope.text))
        if envelope.html is not None:
            form.append(("html", envelope.html))
        if envelope.reply_to:
            form.append(("h:Reply-To", ", ".join(shown(envelope.reply_to))))
        form.append(("h:Message-Id", envelope.message_id))
        form += [(f"h:{n}", no_crlf(n, v)) for n, v in envelope.headers]
        form.append(("v:mailout-key", envelope.idempotency_key))
        files = [_file(a) for a in envelope.attachments]
        return ApiRequest("POST", f"/v3/{self.domain}/messages", form=form, files=files)

    def sign(self, request: httpx.Request) -> None:
        # BasicAuth's flow only sets the Authorization header on this request.
        next(self._auth.auth_flow(request))

    def classify(self, reply: ApiReply, envelope: Envelope) -> SendResult:
        body = reply.json_object()
        text = message_of(body, "message") or (
            reply.body[:200].decode("utf-8", "replace") if not reply.ok else None)
        if reply.ok:
            provider_id = body.get("id")
            return SendResult(Decision.SENT, "accepted", stage=STAGE, code=reply.status,
                              provider_id=provider_id if isinstance(provider_id, str) else None)
        if reply.status == PAYMENT_REQUIRED:
            return SendResult(Decision.PAUSE, "payment_required", stage=STAGE,
                              code=reply.status, text=text)
        if reply.status == DOMAIN_NOT_FOUND:
            return SendResult(Decision.PAUSE, "domain_not_found", stage=STAGE,
                              code=reply.status, text=text)
        return by_status(reply, text)

    def check_request(self) -> ApiRequest:
        return ApiRequest("GET", f"/v3/domains/{self.domain}")

    def check_verdict(self, reply: ApiReply) -> CheckResult:
        if reply.status == DOMAIN_NOT_FOUND:
            return CheckResult(False, f"Mailgun does not know the domain {self.domain!r}")
        return check_by_status(reply, f"GET /v3/domains/{self.domain}")


def _file(a: Attachment) -> tuple[str, tuple[str, bytes, str]]:
    if a.inline and a.cid:
        return ("inline", (a.cid, a.content, a.content_type))
    return ("attachment", (a.filename, a.content, a.content_type))


REGIONS: Final = {"us": "https://api.mailgun.net", "eu": "https://api.eu.mailgun.net"}


def from_url(address: str, query: Mapping[str, str], setting: str) -> ProviderUrl:
    """``mailgun://KEY@DOMAIN``, ``?region=us`` (the default) or ``eu``."""
    key, at, domain = address.rpartition("@")
    if not at or not key or not domain:
        raise ConfigError(setting, "mailgun:// needs the key and the domain: "
                                   "mailgun://KEY@DOMAIN")
    region = query.get("region", "us").lower()
    if region not in REGIONS:
        raise ConfigError(setting, f"?region must be us or eu, got {region!r}")
    secret, domain = unquote(key), unquote(domain).lower()
    return ProviderUrl(f"mailgun://****@{domain}?region={region}", REGIONS[region],
                       lambda: MailgunProvider(secret, domain))
