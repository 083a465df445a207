"""Amazon SES v2 (``ses://ACCESS:SECRET@REGION``): ``SendEmail`` with raw content.

The whole RFC 5322 message goes as ``Content.Raw`` (so attachments, inline parts and
every header travel as built), the recipients as ``Destination`` (Bcc included, as
it is never a header), and the request is signed with SigV4 by botocore
(``mailout[ses]``). An envelope without a wire form (hand-built) gets one from its
fields. SES documents no idempotency key and replaces the Message-ID with its own,
which is the ``MessageId`` stored.

Classification, by the error type SES names (``x-amzn-ErrorType``): ``MessageRejected``
and ``BadRequestException`` fail, except a ``MessageRejected`` naming our own sender
as an unverified identity, which pauses; ``MailFromDomainNotVerifiedException``,
``AccountSuspendedException``, ``SendingPausedException``, ``NotFoundException`` and
HTTP 403 (a bad signature or key) pause; ``TooManyRequestsException``,
``LimitExceededException`` (throttling and quotas) and 5xx retry, honouring
Retry-After. ``mailout check`` reads ``GetAccount`` (``GET /v2/email/account``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any, Final
from urllib.parse import unquote

import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from mailout.exceptions import ConfigError
from mailout.message.envelope import Envelope
from mailout.models import Mailbox
from mailout.transports.base import CheckResult, Decision, SendResult
from mailout.transports.http import (
    STAGE,
    ApiReply,
    ApiRequest,
    addressed,
    b64,
    by_status,
    check_by_status,
    message_of,
    retry_after,
    shown,
)
from mailout.transports.providers import ProviderUrl

SEND_PATH: Final = "/v2/email/outbound-emails"
_FAILED: Final = {"MessageRejected": "message_rejected", "BadRequestException": "rejected"}
_PAUSE: Final = {"MailFromDomainNotVerifiedException": "mail_from_not_verified",
                 "AccountSuspendedException": "account_suspended",
                 "SendingPausedException": "sending_paused",
                 "NotFoundException": "not_found"}
_RETRY: Final = {"TooManyRequestsException": "throttled",
                 "LimitExceededException": "limit_exceeded", "Throttling": "throttled"}


class SesProvider:
    """The SES v2 hooks for :class:`~mailout.transports.http.HttpTransport`."""

    name = "ses"
    dedupe_window: float | None = None  # SES documents no idempotency key

    def __init__(self, access_key: str, secret_key: str, region: str) -> None:
        self._signer = SigV4Auth(Credentials(access_key, secret_key), "ses", region)
        self.region = region
        self.secrets: tuple[str, ...] = (secret_key,)

    def build(self, envelope: Envelope) -> ApiRequest:
        wire = envelope.wire if envelope.wire_builder is not None else _wire(envelope)
        # The raw message names everyone; Destination is who gets this send.
        to, cc, bcc = addressed(envelope)
        # Bare addresses in the JSON fields: SES wants 7-bit ASCII there, and a display
        # name such as "Zoë" went in unencoded. The raw message carries the names.
        destination: dict[str, Any] = {"ToAddresses": _bare(to)}
        if cc:
            destination["CcAddresses"] = _bare(cc)
        if bcc:
            destination["BccAddresses"] = _bare(bcc)
        body: dict[str, Any] = {
            "FromEmailAddress": _bare((envelope.sender,))[0],
            "Destination": destination,
            "Content": {"Raw": {"Data": b64(wire)}},
        }
        if envelope.reply_to:
            body["ReplyToAddresses"] = _bare(envelope.reply_to)
        return ApiRequest("POST", SEND_PATH, json=body)

    def sign(self, request: httpx.Request) -> None:
        # Sign only what goes out as signed: the host (from the URL) and the content type.
        kind = request.headers.get("content-type")
        aws = AWSRequest(method=request.method, url=str(request.url), data=request.content,
                         headers={"Content-Type": kind} if kind else {})
        self._signer.add_auth(aws)
        for name in ("Authorization", "X-Amz-Date", "X-Amz-Security-Token"):
            if name in aws.headers:
                request.headers[name] = aws.headers[name]

    def classify(self, reply: ApiReply, envelope: Envelope) -> SendResult:
        body = reply.json_object()
        kind = _error_type(reply, body)
        text = message_of(body, "message", "Message")
        if kind:
            text = f"{kind}: {text or ''}".rstrip(": ")
        if reply.ok:
            provider_id = body.get("MessageId")
            return SendResult(Decision.SENT, "accepted", stage=STAGE, code=reply.status,
                              provider_id=provider_id if isinstance(provider_id, str) else None)
        common: dict[str, Any] = {"stage": STAGE, "code": reply.status, "text": text}
        if kind == "MessageRejected" and _sender_unverified(text or "", envelope):
            # Our own From is not a verified identity: every message would fail the
            # same way, one by one. A configuration error: pause and alert. (An
            # unverified recipient, in the sandbox, stays this message's failure.)
            return SendResult(Decision.PAUSE, "sender_not_verified", **common)
        if kind in _FAILED:
            return SendResult(Decision.FAILED, _FAILED[kind], **common)
        if kind in _PAUSE:
            return SendResult(Decision.PAUSE, _PAUSE[kind], **common)
        if kind in _RETRY:
            return SendResult(Decision.RETRY, _RETRY[kind], **common,
                              retry_after=retry_after(reply.headers.get("retry-after")))
        return by_status(reply, text)

    def check_request(self) -> ApiRequest:
        return ApiRequest("GET", "/v2/email/account")

    def check_verdict(self, reply: ApiReply) -> CheckResult:
        verdict = check_by_status(reply, "GetAccount")
        if verdict.ok and reply.json_object().get("SendingEnabled") is False:
            return CheckResult(False, "the credentials work but sending is disabled for "
                                      f"the account in {self.region}")
        return verdict


def _bare(mailboxes: Sequence[Mailbox]) -> list[str]:
    """The addresses alone, an internationalised domain in its ASCII (IDNA) form."""
    out = []
    for mailbox in mailboxes:
        local, _, domain = mailbox.address.rpartition("@")
        if not domain.isascii():
            domain = domain.encode("idna").decode("ascii")
        out.append(f"{local}@{domain}")
    return out


def _sender_unverified(text: str, envelope: Envelope) -> bool:
    """Whether a MessageRejected reply says the sender's identity is not verified
    ("Email address is not verified. The following identities failed the check in
    region ...: shop@example.com"), naming our From rather than a recipient."""
    if "not verified" not in text.lower():
        return False
    failed = text.rpartition(":")[2].lower()
    sender = envelope.sender.address.lower()
    return sender in failed or sender.rpartition("@")[2] in {
        part.strip().rstrip(".") for part in failed.split(",")}


def _error_type(reply: ApiReply, body: dict[str, Any]) -> str | None:
    raw = reply.headers.get("x-amzn-errortype") or body.get("__type") or body.get("code")
    if not isinstance(raw, str) or not raw:
        return None
    return raw.split(":", 1)[0].rsplit("#", 1)[-1]


def _wire(envelope: Envelope) -> bytes:
    """An RFC 5322 form of a hand-built envelope (the renderer's is used when present)."""
    msg = EmailMessage()
    msg["Message-ID"] = envelope.message_id
    msg["Date"] = formatdate(usegmt=True)
    msg["From"] = str(envelope.sender)
    msg["To"] = ", ".join(shown(envelope.to))
    if envelope.cc:
        msg["Cc"] = ", ".join(shown(envelope.cc))
    if envelope.reply_to:
        msg["Reply-To"] = ", ".join(shown(envelope.reply_to))
    msg["Subject"] = envelope.subject
    for name, value in envelope.headers:
        msg[name] = value
    msg.set_content(envelope.text or "")
    if envelope.html is not None:
        msg.add_alternative(envelope.html, subtype="html")
    for a in envelope.attachments:
        maintype, _, subtype = a.content_type.partition("/")
        html_part = msg.get_body(("html",))
        if a.inline and a.cid and isinstance(html_part, EmailMessage):
            html_part.add_related(a.content, maintype=maintype, subtype=subtype or "octet-stream",
                                  cid=f"<{a.cid}>", filename=a.filename)
        else:
            msg.add_attachment(a.content, maintype=maintype, subtype=subtype or "octet-stream",
                               filename=a.filename)
    return msg.as_bytes(policy=msg.policy.clone(linesep="\r\n"))


def from_url(address: str, query: Mapping[str, str], setting: str) -> ProviderUrl:
    """``ses://ACCESS:SECRET@REGION`` (a ``/`` in the secret as ``%2F``), or the region
    as ``?region=``."""
    creds, at, region = address.rpartition("@")
    access, colon, secret = creds.partition(":")
    region = unquote(query.get("region") or region)
    if not at or not colon or not access or not secret or not region:
        raise ConfigError(setting, "ses:// needs the access key, the secret and the region: "
                                   "ses://ACCESS:SECRET@REGION (a / in the secret as %2F)")
    access, secret = unquote(access), unquote(secret)
    return ProviderUrl(f"ses://{access}:****@{region}", f"https://email.{region}.amazonaws.com",
                       lambda: SesProvider(access, secret, region))
