"""The receiver contract: verify a request, then parse it into provider-neutral events.

A :class:`Receiver` gets the raw request (headers with lower-case names, the body
bytes untouched: signatures cover the exact bytes) and returns a :class:`Parsed`:
the events, the delivery's replay nonce if the provider signs one, and how many
records it skipped on purpose (opens, clicks). It raises :class:`WebhookError`
(with the HTTP status to answer) for anything it will not accept; the handler then
stores nothing.

Verification always comes first, before the body is parsed: an unauthenticated
request learns nothing about what the parser would have thought of its JSON.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from mailout.exceptions import MailoutError
from mailout.models import Event, Provider

# Error codes, the ``error`` field of a refusal's JSON body.
BAD_SIGNATURE = "bad_signature"  # 401: the signature or credentials do not verify
MISSING_AUTH = "missing_auth"  # 401: no signature or credentials at all
STALE = "stale"  # 401: the signed timestamp is outside the tolerance
REPLAYED = "replayed"  # 400: this signed delivery was accepted before
INVALID_JSON = "invalid_json"  # 400
MALFORMED = "malformed"  # 400: valid JSON, but not the provider's shape
UNKNOWN_EVENT = "unknown_event_type"  # 400
MISSING_HEADER = "missing_header"  # 400
TOO_LARGE = "too_large"  # 413
UNSUPPORTED_MEDIA = "unsupported_media_type"  # 415
FORBIDDEN_TOPIC = "forbidden_topic"  # 403: an SNS topic not in MAILOUT_WEBHOOK_SES_TOPICS


class WebhookError(MailoutError, ValueError):
    """A refused webhook request: ``status`` to answer, ``code`` (above) and ``reason``.
    The reason never quotes secrets or the body."""

    def __init__(self, status: int, code: str, reason: str) -> None:
        self.status = status
        self.code = code
        self.reason = reason
        super().__init__(f"{status} {code}: {reason}")


def unauthorized(reason: str, code: str = BAD_SIGNATURE) -> WebhookError:
    return WebhookError(401, code, reason)


def bad_request(reason: str, code: str = MALFORMED) -> WebhookError:
    return WebhookError(400, code, reason)


@dataclass(frozen=True, slots=True)
class Request:
    """What a receiver sees of an HTTP request."""

    headers: Mapping[str, str]  # lower-case names
    body: bytes
    query: Mapping[str, str] = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        value = self.headers.get(name.lower())
        return value.strip() if value is not None and value.strip() else None

    def require(self, name: str, *, auth: bool = True) -> str:
        """A header's value; missing means 401 for a signature header, else 400."""
        value = self.header(name)
        if value is None:
            if auth:
                raise unauthorized(f"the {name} header is missing", MISSING_AUTH)
            raise bad_request(f"the {name} header is missing", MISSING_HEADER)
        return value


@dataclass(frozen=True, slots=True)
class Parsed:
    """A verified request's content."""

    events: tuple[Event, ...] = ()
    nonce: str | None = None  # signed and unique per delivery: a repeat is a replay
    ignored: int = 0  # records of kinds mailout does not store (opens, clicks, sends)
    reply: dict[str, Any] | None = None  # extra fields for the response (SNS confirmation)


class Receiver(Protocol):
    """One provider's endpoint."""

    provider: Provider

    def receive(self, request: Request, now: float) -> Parsed:
        """Verify ``request`` (``now``: Unix time) and parse it. Raises WebhookError."""
        ...


def json_body(body: bytes) -> Any:
    """The body as JSON; 400 ``invalid_json`` otherwise."""
    try:
        return json.loads(body)
    # ValueError also covers an integer past Python's 4,300-digit conversion limit,
    # which used to escape as a 500 with a traceback (before authentication, for
    # Mailgun and SES, whose signatures are inside the JSON).
    except (ValueError, RecursionError) as exc:
        raise bad_request(f"the body is not JSON ({type(exc).__name__})", INVALID_JSON
                          ) from None


def require_dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad_request(f"{what} must be a JSON object")
    return value


def sub_dict(record: Mapping[str, Any], name: str) -> dict[str, Any]:
    """An optional nested object; {} when it is missing or not an object."""
    value = record.get(name)
    return value if isinstance(value, dict) else {}


def sub_list(record: Mapping[str, Any], name: str) -> list[Any]:
    """An optional nested list; [] when it is missing or not a list."""
    value = record.get(name)
    return value if isinstance(value, list) else []


def text_field(record: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    value = record.get(name)
    if value is None or value == "":
        if required:
            raise bad_request(f"the field {name!r} is missing")
        return None
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise bad_request(f"the field {name!r} must be a string")
    return str(value)


def check_timestamp(value: str, now: float, tolerance: float) -> float:
    """A signed Unix timestamp within ``tolerance`` of ``now``; 401 otherwise."""
    try:
        stamp = float(value)
    except ValueError:
        raise unauthorized("the signature timestamp is not a number") from None
    if stamp != stamp or abs(now - stamp) > tolerance:  # NaN, or too old or too new
        raise unauthorized(f"the signature timestamp is more than {tolerance:g}s away from "
                           "now", STALE)
    return stamp


def check_basic_auth(request: Request, expected: str) -> None:
    """``Authorization: Basic`` must carry ``expected`` (user:password); 401 otherwise."""
    given = request.header("authorization")
    if given is None or not given.lower().startswith("basic "):
        raise unauthorized("basic auth credentials are required", MISSING_AUTH)
    try:
        decoded = base64.b64decode(given[6:].strip(), validate=True)
    except (binascii.Error, ValueError):
        raise unauthorized("the basic auth header is not base64") from None
    if not hmac.compare_digest(decoded, expected.encode("utf-8")):
        raise unauthorized("wrong basic auth credentials")


def check_bearer(request: Request, expected: str) -> None:
    given = request.header("authorization")
    if given is None or not given.lower().startswith("bearer "):
        raise unauthorized("a bearer token is required", MISSING_AUTH)
    if not hmac.compare_digest(given[7:].strip().encode(), expected.encode()):
        raise unauthorized("wrong bearer token")
