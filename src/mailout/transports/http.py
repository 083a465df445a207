"""What every HTTP API transport shares: one client, timeouts, and the error mapping.

A provider module (``resend``, ``postmark``...) supplies a :class:`Provider`: how to
turn an :class:`~mailout.message.envelope.Envelope` into an :class:`ApiRequest`, how
to sign it, and what the provider's answer means. :class:`HttpTransport` does the
rest, the same way for every provider:

- one ``httpx.AsyncClient`` per transport (per lane), keeping connections alive;
- failures of the exchange itself are mapped by *when* they happened: a refused
  connection or a connect timeout is an ``OUTAGE``; a write that failed or timed out
  is a ``RETRY`` (the provider never saw a whole request); a timeout or disconnect
  *after* the request was sent is ``UNKNOWN`` (the provider may have accepted it);
- a ``Retry-After`` header (seconds or an HTTP date) becomes ``SendResult.retry_after``;
- the provider's words are kept for the attempt log with every secret blanked out.

httpx is imported here only: install ``mailout[http]``.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Final, Protocol

import httpx

from mailout.message.envelope import Envelope
from mailout.models import Mailbox
from mailout.transports.base import CheckResult, Decision, SendResult

DEFAULT_TIMEOUT: Final = 30.0
MAX_RETRY_AFTER: Final = 86_400.0  # a longer delay than a day is a provider's mistake
MAX_TEXT: Final = 500  # characters of a provider's answer kept for the attempt log
STAGE: Final = "http"  # the attempt log's stage for everything an HTTP API answers
_REDACTED: Final = "********"


class Unsendable(Exception):
    """The message cannot be expressed in this provider's request (no failure of ours
    or theirs to retry): the transport fails it with ``reason``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class ApiRequest:
    """One request to a provider's API, before authentication is added."""

    method: str
    path: str  # joined to the endpoint
    json: Any = None  # a JSON body
    form: Sequence[tuple[str, str]] = ()  # form fields (repeated names allowed)
    files: Sequence[tuple[str, tuple[str, bytes, str]]] = ()  # multipart file parts
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ApiReply:
    """What the provider answered."""

    status: int
    headers: Mapping[str, str]  # case-insensitive (httpx.Headers)
    body: bytes

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def json_object(self) -> dict[str, Any]:
        """The body as a JSON object, or an empty dict."""
        value = self.json()
        return value if isinstance(value, dict) else {}

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class Provider(Protocol):
    """One provider's hooks; everything else is :class:`HttpTransport`'s."""

    name: str
    dedupe_window: float | None
    secrets: tuple[str, ...]  # blanked out of anything kept or shown

    def build(self, envelope: Envelope) -> ApiRequest:
        """The send request. Raises :class:`Unsendable` for a message it cannot carry."""
        ...

    def sign(self, request: httpx.Request) -> None:
        """Add authentication to a request about to go out."""
        ...

    def classify(self, reply: ApiReply, envelope: Envelope) -> SendResult:
        """What the provider's answer to a send means."""
        ...

    def check_request(self) -> ApiRequest:
        """A documented read-only request that proves the credentials work."""
        ...

    def check_verdict(self, reply: ApiReply) -> CheckResult:
        """What the answer to :meth:`check_request` means."""
        ...


class HttpTransport:
    """A :class:`~mailout.transports.base.Transport` over a provider's HTTP API."""

    def __init__(self, provider: Provider, endpoint: str, *, timeout: float = DEFAULT_TIMEOUT,
                 concurrency: int = 10, shown: str | None = None) -> None:
        self.provider = provider
        self.name = provider.name
        self.dedupe_window = provider.dedupe_window
        self.endpoint = endpoint.rstrip("/")
        self.shown = shown or f"{provider.name} at {self.endpoint}"
        self._client = httpx.AsyncClient(
            base_url=self.endpoint,
            timeout=httpx.Timeout(timeout),
            limits=httpx.Limits(max_connections=max(1, concurrency),
                                max_keepalive_connections=max(1, concurrency)),
            headers={"User-Agent": "mailout", "Accept": "application/json"},
            follow_redirects=False,  # a redirect would resend the body (and the key) elsewhere
        )

    async def send(self, envelope: Envelope) -> SendResult:
        try:
            request = self.provider.build(envelope)
        except Unsendable as exc:
            return SendResult(Decision.FAILED, exc.reason, stage="build",
                              detail=self.redact(exc.detail)[:200])
        reply = await self._exchange(request)
        if isinstance(reply, SendResult):
            return reply
        result = self.provider.classify(reply, envelope)
        return _with_text(result, self.redact)

    async def check(self) -> CheckResult:
        reply = await self._exchange(self.provider.check_request())
        if isinstance(reply, SendResult):
            return CheckResult(False, self.redact(
                f"{self.shown}: {reply.detail or reply.reason}"))
        verdict = self.provider.check_verdict(reply)
        return CheckResult(verdict.ok, self.redact(f"{self.shown}: {verdict.line}"))

    async def close(self) -> None:
        await self._client.aclose()  # httpx allows a second close

    def redact(self, text: str) -> str:
        """``text`` with every secret of this transport blanked out."""
        for secret in self.provider.secrets:
            if secret:
                text = text.replace(secret, _REDACTED)
        return text

    async def _exchange(self, api: ApiRequest) -> ApiReply | SendResult:
        """Send ``api``; the reply, or the exchange's failure as a result."""
        request = self._client.build_request(
            api.method, api.path, json=api.json,
            data=dict_or_pairs(api.form) if api.form else None,
            files=list(api.files) or None, headers=dict(api.headers),
        )
        self.provider.sign(request)
        try:
            response = await self._client.send(request)
        except httpx.HTTPError as exc:
            return exchange_failure(exc)
        return ApiReply(response.status_code, response.headers, response.content)


def dict_or_pairs(form: Sequence[tuple[str, str]]) -> Any:
    """Form fields for httpx: a dict of lists keeps repeated names (to=a, to=b)."""
    fields: dict[str, list[str]] = {}
    for name, value in form:
        fields.setdefault(name, []).append(value)
    return fields


def exchange_failure(exc: httpx.HTTPError) -> SendResult:
    """What a failed exchange means, by when it failed (see the module docstring)."""
    kind = type(exc).__name__
    if isinstance(exc, httpx.ConnectTimeout | httpx.ConnectError):
        return SendResult(Decision.OUTAGE, "connect_failed", stage="connect",
                          detail=f"{kind}: could not connect")
    if isinstance(exc, httpx.PoolTimeout):
        return SendResult(Decision.RETRY, "pool_timeout", stage="connect",
                          detail="no free connection in time; nothing was sent")
    if isinstance(exc, httpx.WriteTimeout | httpx.WriteError):
        return SendResult(Decision.RETRY, "write_failed", stage="request",
                          detail=f"{kind} while sending the request")
    if isinstance(exc, httpx.ReadTimeout):
        return SendResult(Decision.UNKNOWN, "timeout_after_request", stage="response",
                          detail="no answer in time after the request was sent")
    if isinstance(exc, httpx.ReadError | httpx.RemoteProtocolError):
        return SendResult(Decision.UNKNOWN, "disconnect_after_request", stage="response",
                          detail=f"{kind}: the connection ended after the request was sent")
    # Anything else (an unsupported protocol, a bad URL) happened before sending.
    return SendResult(Decision.OUTAGE, "request_error", stage="connect", detail=kind)


def retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def by_status(reply: ApiReply, text: str | None, *, provider_id: str | None = None
              ) -> SendResult:
    """The usual meaning of an HTTP status, for what a provider does not say otherwise:
    2xx sent; 401/403 pause (our credentials); 408, 409, 429 and 5xx retry, honouring
    Retry-After; 413 and other 4xx fail (the request itself is wrong)."""
    status = reply.status
    wait = retry_after(reply.headers.get("retry-after"))
    if reply.ok:
        return SendResult(Decision.SENT, "accepted", provider_id=provider_id, stage=STAGE,
                          code=status, text=text)
    if status in (401, 403):
        decision, reason, wait = Decision.PAUSE, "unauthorized", None
    elif status == 429:
        decision, reason = Decision.RETRY, "rate_limited"
    elif status in (408, 409):
        decision, reason = Decision.RETRY, "try_again"
    elif status >= 500:
        decision, reason = Decision.RETRY, "server_error"
    else:
        decision, reason, wait = Decision.FAILED, "too_large" if status == 413 else "rejected", None
    return SendResult(decision, reason, stage=STAGE, code=status, text=text, retry_after=wait)


def check_by_status(reply: ApiReply, what: str) -> CheckResult:
    """A check verdict from the status of a read-only request about ``what``."""
    if reply.ok:
        return CheckResult(True, f"credentials accepted ({what}: HTTP {reply.status})")
    if reply.status in (401, 403):
        return CheckResult(False, f"credentials refused (HTTP {reply.status}): check the key "
                                  "in MAILOUT_TRANSPORT")
    return CheckResult(False, f"{what} answered HTTP {reply.status}")


def _with_text(result: SendResult, redact: Callable[[str], str]) -> SendResult:
    if result.text is None:
        return result
    return replace(result, text=redact(result.text)[:MAX_TEXT])


def message_of(body: Mapping[str, Any], *keys: str) -> str | None:
    """The first of ``keys`` in an error body that holds text."""
    for key in keys:
        value = body.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def b64(data: bytes) -> str:
    """Base64 text, as JSON APIs take file contents."""
    return base64.b64encode(data).decode("ascii")


def shown(mailboxes: Sequence[Mailbox]) -> list[str]:
    """Mailboxes as header text (``"Name" <a@b>``), as most JSON APIs take them."""
    return [str(m) for m in mailboxes]


def no_crlf(name: str, value: str) -> str:
    """``value`` unchanged; raises Unsendable if it holds CR, LF or another control
    character, which must never reach a header through a provider's API."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise Unsendable("bad_header", f"{name} holds a control character")
    return value


def addressed(envelope: Envelope) -> tuple[tuple[Mailbox, ...], tuple[Mailbox, ...],
                                          tuple[Mailbox, ...]]:
    """To, Cc and Bcc of this send. When ``deliver_to`` limits it (a retry of a message
    some recipients already accepted), only those: a JSON API has no envelope apart
    from its address fields, so the others cannot be named without being sent to."""
    if not envelope.deliver_to:
        return envelope.to, envelope.cc, envelope.bcc
    wanted = {a.lower() for a in envelope.deliver_to}

    def keep(boxes: tuple[Mailbox, ...]) -> tuple[Mailbox, ...]:
        return tuple(m for m in boxes if m.address.lower() in wanted)

    return keep(envelope.to), keep(envelope.cc), keep(envelope.bcc)
