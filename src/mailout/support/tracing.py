"""OpenTelemetry traces, when the application has them (the ``mailout[otel]`` extra).

mailout never configures OpenTelemetry: it uses the global tracer provider that the
application, or ``opentelemetry-instrument``, set up. Without ``opentelemetry-api``
installed, or with no SDK configured (the API's proxy provider), every function here
returns at once after one cached check, and nothing is recorded. The API is imported
on first use, so ``import mailout.outbox`` never loads it.

The trace context travels with the row: enqueue stores the W3C ``traceparent`` and
``tracestate`` of its ``create`` span, and each worker attempt's ``send`` span links
to it (a link, not a child: the send happens later, maybe several times).

What a span or an event may carry: the queue, the key, the Message-ID, the row id,
the attempt number, the transport, the outcome and its reason label, the reply code,
the enhanced code, the provider's message id and an exception's type. Never an
address, a subject, a body, a param, a reply text or an exception's message (either
may quote an address): trace backends keep what they get beyond the reach of
``MAILOUT_LOG_RECIPIENTS``.

May import: ``mailout.models``, ``mailout.exceptions`` (and ``mailout.__version__``);
``opentelemetry-api``,
lazily.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import hmac
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mailout import __version__
from mailout.exceptions import ConfigError
from mailout.models import ClaimedMessage, Completion, Outcome

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

SYSTEM = "mailout"  # messaging.system
# W3C: a vendor may drop tracestate it cannot carry; the column holds this much.
TRACESTATE_MAX = 512
# Attempts that did not deliver: the span's status is ERROR, with an event saying why.
_FAILED = frozenset({Outcome.RETRY, Outcome.FAILED, Outcome.DEAD, Outcome.UNKNOWN,
                     Outcome.PAUSED, Outcome.OUTAGE})
# Records nothing (shared: nullcontext can be entered again): what every function
# below returns when nothing is recorded, and callers that know there is nothing use.
NOTHING: AbstractContextManager[Any] = contextlib.nullcontext(None)


@dataclass(frozen=True, slots=True)
class _Api:
    """The parts of opentelemetry-api mailout uses, loaded once."""

    trace: Any  # the opentelemetry.trace module
    context: Any  # the opentelemetry.context module
    # W3C trace context, whatever global propagator the application set: the columns
    # hold W3C's traceparent and tracestate.
    propagator: Any
    unconfigured: tuple[type, ...]  # provider types that mean "no SDK"


class TraceRecipients(enum.StrEnum):
    """What a ``send`` span says of its recipients (``MAILOUT_TRACE_RECIPIENTS``)."""

    OFF = "off"  # nothing (the default)
    # mailout.recipient_hashes: keyed HMAC-SHA256 of each lowercased address, so that
    # someone holding the secret can find a customer's attempts, and nobody else can
    # recover or guess-and-check an address (a plain hash of an address is neither).
    HASHED = "hashed"


SECRET_SETTING = "MAILOUT_TRACE_RECIPIENTS_SECRET"  # noqa: S105 - its name, not a secret
SECRET_MIN_CHARS = 16  # as for the return-path secret: too short to guess, not a password
HASH_HEX_CHARS = 32  # 128 bits of the HMAC: no collisions among real recipient lists


def recipients_key(mode: TraceRecipients, secret: str | None) -> bytes | None:
    """The HMAC key the worker hashes recipients with; None when they are not traced.
    Raises ConfigError for ``hashed`` without a secret of at least 16 characters."""
    if mode is TraceRecipients.OFF:
        return None
    if not secret or len(secret) < SECRET_MIN_CHARS:
        raise ConfigError(SECRET_SETTING, f"MAILOUT_TRACE_RECIPIENTS=hashed needs a secret of "
                                          f"at least {SECRET_MIN_CHARS} random characters "
                                          f"(got {len(secret or '')})")
    return secret.encode()


def recipient_hash(key: bytes, address: str) -> str:
    """What ``mailout.recipient_hashes`` holds for ``address`` under ``key``."""
    return hmac.new(key, address.strip().lower().encode(), hashlib.sha256).hexdigest()[
        :HASH_HEX_CHARS]


def _recipient_hashes(msg: ClaimedMessage, key: bytes) -> list[str]:
    boxes = (*msg.to, *msg.cc, *msg.bcc)
    addresses = [b.address for b in boxes] if boxes else [msg.recipient]
    return [recipient_hash(key, a) for a in addresses]


_api: _Api | None = None
_loaded = False
# (provider, its mailout tracer): get_tracer() builds a new tracer on every call.
_cached: tuple[object, Tracer | None] = (None, None)


def _load() -> _Api | None:
    global _api, _loaded
    if not _loaded:
        _loaded = True
        try:
            from opentelemetry import context, trace
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator,
            )
        except ImportError:
            return None
        _api = _Api(trace, context, TraceContextTextMapPropagator(),
                    (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
    return _api


def tracer() -> Tracer | None:
    """mailout's tracer from the global provider; None without the API or an SDK."""
    global _cached
    api = _api if _loaded else _load()
    if api is None:
        return None
    provider = api.trace.get_tracer_provider()
    if provider is not _cached[0]:
        found = None if isinstance(provider, api.unconfigured) else \
            provider.get_tracer("mailout", __version__)
        _cached = (provider, found)
    return _cached[1]


def current_ids() -> tuple[str, str] | None:
    """``(trace_id, span_id)`` in hex of the active span, for a log line; else None."""
    api = _api if _loaded else _load()
    if api is None:
        return None
    found = api.trace.get_current_span().get_span_context()
    if not found.is_valid:
        return None
    return api.trace.format_trace_id(found.trace_id), api.trace.format_span_id(found.span_id)


def creating(rows: Sequence[Mapping[str, Any]],
             ) -> AbstractContextManager[dict[str, str | None] | None]:
    """The ``create`` span of one enqueue call of ``rows`` (enqueue's column values:
    ``queue``, ``message_id``, ``idempotency_key``), a child of the caller's active
    span and current while the block runs. It yields the columns to store with every
    row (``traceparent``, ``tracestate``). Without an active span (or without the API)
    it yields None and records nothing: an enqueue outside any trace starts none.
    """
    found = tracer()
    if found is None:
        return NOTHING
    assert _api is not None
    if not _api.trace.get_current_span().get_span_context().is_valid:
        return NOTHING
    queues = {row["queue"] for row in rows}
    queue = next(iter(queues)) if len(queues) == 1 else None
    attributes: dict[str, str | int] = {
        "messaging.system": SYSTEM, "messaging.operation.type": "create",
        "messaging.operation.name": "create",
    }
    if queue is not None:
        attributes["messaging.destination.name"] = queue
    if len(rows) == 1:
        attributes["messaging.message.id"] = rows[0]["message_id"]
        attributes["mailout.key"] = rows[0]["idempotency_key"]
    else:
        attributes["messaging.batch.message_count"] = len(rows)
    span = found.start_span("create" if queue is None else f"create {queue}",
                            kind=_api.trace.SpanKind.PRODUCER, attributes=attributes)
    return _current(span, _carrier(span))


def _carrier(span: Span) -> dict[str, str | None]:
    assert _api is not None
    carrier: dict[str, str] = {}
    _api.propagator.inject(carrier, context=_api.trace.set_span_in_context(span))
    state = carrier.get("tracestate")
    return {"traceparent": carrier.get("traceparent"),
            "tracestate": state if state and len(state) <= TRACESTATE_MAX else None}


@contextlib.contextmanager
def _current(span: Span, value: Any) -> Iterator[Any]:
    """``span`` as the current span while the block runs, ended after it. An exception
    is recorded by its type only: its message may quote an address."""
    assert _api is not None
    token = _api.context.attach(_api.trace.set_span_in_context(span))
    try:
        yield value
    except BaseException as exc:
        _error(span, type(exc).__name__, {"exception.type": _type_name(exc)})
        raise
    finally:
        _api.context.detach(token)
        span.end()


def _type_name(exc: BaseException) -> str:
    kind = type(exc)
    return kind.__qualname__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__qualname__}"


def _error(span: Span, description: str, event: Mapping[str, str | int]) -> None:
    assert _api is not None
    span.set_status(_api.trace.Status(_api.trace.StatusCode.ERROR, description))
    span.add_event("exception" if "exception.type" in event else "mailout.attempt_failed",
                   dict(event))


def _link(traceparent: str, tracestate: str | None) -> list[Any]:
    """A link to a stored W3C context; none when it does not parse."""
    assert _api is not None
    carrier = {"traceparent": traceparent}
    if tracestate:
        carrier["tracestate"] = tracestate
    linked = _api.trace.get_current_span(_api.propagator.extract(carrier)).get_span_context()
    return [_api.trace.Link(linked)] if linked.is_valid else []


def ingesting(traceparent: str, tracestate: str | None, *, event_type: str, provider: str,
              outbox_id: int, matched_by: str, subtype: str | None,
              reason: str | None) -> AbstractContextManager[Any]:
    """The ``ingest`` span of a delivery event (bounce, complaint, delivery...) linked
    to an outbox row: a child of the current span (the webhook request, if traced),
    linked to the context the row was enqueued under. That context, rather than a send
    span's, is what the row stores: every send span links to it too, so the request,
    the attempts and the feedback meet there. Carries the event's type, subtype and
    reason label, the provider and how the row was found; never the recipient or the
    diagnostic text."""
    found = tracer()
    if found is None:
        return NOTHING
    assert _api is not None
    attributes: dict[str, str | int] = {
        "messaging.system": SYSTEM, "messaging.operation.type": "process",
        "messaging.operation.name": "ingest", "mailout.event_type": event_type,
        "mailout.provider": provider, "mailout.outbox_id": outbox_id,
        "mailout.matched_by": matched_by,
    }
    if subtype is not None:
        attributes["mailout.event_subtype"] = subtype
    if reason is not None:
        attributes["mailout.reason"] = reason
    return _current(found.start_span(f"ingest {event_type}", kind=_api.trace.SpanKind.CONSUMER,
                                     links=_link(traceparent, tracestate),
                                     attributes=attributes), None)


def sending(msg: ClaimedMessage, transport: str, recipients_key: bytes | None = None,
            ) -> AbstractContextManager[Span | None]:
    """The ``send`` span of one attempt, current while the attempt runs and linked to
    the context its row was enqueued under (when it was). With ``recipients_key``
    (``MAILOUT_TRACE_RECIPIENTS=hashed``) it carries the keyed hashes of the
    recipients, never the addresses. Yields None when nothing is recorded; give the
    span and the attempt's completion to :func:`finished`."""
    found = tracer()
    if found is None:
        return NOTHING
    assert _api is not None
    links = [] if msg.traceparent is None else _link(msg.traceparent, msg.tracestate)
    span = found.start_span(f"send {msg.queue}", kind=_api.trace.SpanKind.CONSUMER, links=links,
                            attributes={
                                "messaging.system": SYSTEM,
                                "messaging.operation.type": "process",
                                "messaging.operation.name": "send",
                                "messaging.destination.name": msg.queue,
                                "messaging.message.id": msg.message_id,
                                "mailout.key": msg.key,
                                "mailout.outbox_id": msg.id,
                                "mailout.attempt": msg.attempts,
                                "mailout.transport": transport,
                            })
    if recipients_key is not None:
        span.set_attribute("mailout.recipient_hashes", _recipient_hashes(msg, recipients_key))
    return _current(span, span)


def step(name: str, wanted: bool) -> AbstractContextManager[Any]:
    """A child span of the current one for a step of an attempt (``render``,
    ``transport``) when ``wanted`` (``MAILOUT_TRACE_STEPS``); nothing when nothing is
    recorded. Off by default: under an SDK each span costs about a tenth of what the
    worker spends on a message (docs/capacity.md)."""
    if not wanted:
        return NOTHING
    found = tracer()
    if found is None:
        return NOTHING
    return _current(found.start_span(f"mailout.{name}"), None)


def finished(span: Span | None, completion: Completion) -> None:
    """Record how the attempt ended on its ``send`` span: outcome, reason label, reply
    and enhanced codes, the transport that answered and the provider's id. An attempt
    that did not deliver gets status ERROR and an event with the same fields."""
    if span is None:
        return
    fields: dict[str, str | int] = {"mailout.outcome": completion.outcome.value,
                                    "mailout.status": completion.status.value}
    for name, value in (("mailout.reason", completion.reason),
                        ("mailout.reply_code", completion.reply_code),
                        ("mailout.enhanced_code", completion.enhanced_code),
                        ("mailout.stage", completion.stage),
                        ("mailout.transport", completion.transport),
                        ("mailout.provider_message_id", completion.provider_message_id)):
        if value is not None:
            fields[name] = value
    span.set_attributes(fields)
    if completion.outcome in _FAILED:
        _error(span, f"{completion.outcome.value}: {completion.reason or 'no reason'}", fields)
