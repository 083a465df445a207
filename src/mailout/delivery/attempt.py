"""One send attempt: render, send, and decide what the row becomes.

The transport has already said what the send means (a provider-neutral
:class:`~mailout.transports.base.SendResult`); ``decide`` turns that into the row's
next state under the retry policy, and is pure. ``run`` does the I/O of a single
attempt and never raises for a problem with the message or the provider.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from mailout.delivery.after_unknown import (
    Park,
    Resend,
    after_unknown,
    described,
    key_window,
    window_left,
)
from mailout.delivery.guards import Cancel, Guards, Hold, Proceed, Retry, Verdict
from mailout.delivery.policy import (
    GiveUp,
    Reschedule,
    RetryPolicy,
    after_transient_failure,
    is_expired,
)
from mailout.exceptions import RenderError
from mailout.message.envelope import Envelope
from mailout.message.render import Renderer
from mailout.models import (
    PARTIALLY_REFUSED,
    Attachment,
    ClaimedMessage,
    Completion,
    Contact,
    OnUnknown,
    Outcome,
    RecipientOutcome,
    Settled,
    Status,
)
from mailout.support import tracing
from mailout.support.logs import LogRecipients, SendLog, redact_addresses
from mailout.transports.base import Decision, SendResult, Transport

log = logging.getLogger(__name__)

SCHEMA_RECHECK_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Context:
    """What every attempt of one worker shares."""

    worker: str
    policy: RetryPolicy
    renderer: Renderer
    transport: Transport
    rng: random.Random
    on_unknown: OnUnknown = OnUnknown.RESEND
    guards: Guards | None = None
    engine: Engine | None = None  # for send-time checks that read the database
    queue_policies: Mapping[str, RetryPolicy] = field(default_factory=dict)
    # Finished attempts' log lines (MAILOUT_LOG_SENDS); one per worker, shared by lanes.
    # It also says how every line about an attempt shows recipients (log_recipients).
    send_log: SendLog = field(default_factory=lambda: SendLog(log))
    # Reads a message's attachments (database I/O: run in a thread); None: no storage.
    load_attachments: Callable[[int], tuple[Attachment, ...]] | None = None
    # MAILOUT_TRACE_STEPS: render and transport child spans under an OpenTelemetry SDK.
    trace_steps: bool = False
    # MAILOUT_TRACE_RECIPIENTS=hashed: the HMAC key of the send span's recipient hashes.
    trace_recipients_key: bytes | None = field(default=None, repr=False)

    @property
    def log_recipients(self) -> LogRecipients:
        """MAILOUT_LOG_RECIPIENTS, as the send log applies it: one setting for every
        line about an attempt."""
        return self.send_log.recipients

    def retry_policy(self, queue: str) -> RetryPolicy:
        return self.queue_policies.get(queue, self.policy)


_CONTACT = {Decision.PAUSE: Contact.PAUSE, Decision.OUTAGE: Contact.OUTAGE}


def _completion(msg: ClaimedMessage, ctx: Context, outcome: Outcome, status: Status,
                **how: Any) -> Completion:
    """How ``msg``'s attempt ended: the attempt's identity (row, lease, attempt number,
    start, worker, recipient) from the claim, ``outcome`` and ``status``, and ``how``:
    the rest of :class:`~mailout.models.Completion`'s fields."""
    return Completion(id=msg.id, lease_token=msg.lease_token, attempt=msg.attempts,
                      outcome=outcome, status=status, started_at=msg.claimed_at,
                      worker=ctx.worker, recipient=msg.recipient, **how)


def _next_try(msg: ClaimedMessage, ctx: Context) -> Reschedule | GiveUp:
    """When to try ``msg`` again after a transient failure under its queue's retry
    policy, or why not to."""
    return after_transient_failure(ctx.retry_policy(msg.queue), attempts=msg.attempts,
                                   now=msg.claimed_at, expires_at=msg.expires_at, rng=ctx.rng)


def decide(
    msg: ClaimedMessage,
    result: SendResult,
    *,
    ctx: Context,
    pause_seconds: float,
    outage_seconds: float | None = None,
    window_left: float | None = None,
) -> Completion:
    """The row's next state after a send that ended in ``result``.

    ``window_left`` is how long the transport that answered still drops a copy sent
    with this message's key (None: it drops none): an ``UNKNOWN`` outcome is resent
    inside that time, even under ``MAILOUT_ON_UNKNOWN=hold``, because the provider
    keeps one copy; past it, the policy decides.

    PAUSE and OUTAGE are not the message's fault: the row goes back to ``pending``
    uncharged (``pause_seconds`` / ``outage_seconds`` from now), and its attempt is
    logged as not charged. Those of a send pinned to one failover member
    (``waits_for``) make it ``waiting`` for that member, and pause nothing else.
    During an outage a message dies only by its age limit (``max_age``), never by
    ``max_attempts``.

    A message to several recipients is settled one recipient at a time (see
    :func:`per_recipient`); the rest of the rules are the message's.
    """
    completion = _decide_message(msg, result, ctx=ctx, pause_seconds=pause_seconds,
                                 outage_seconds=outage_seconds, window_left=window_left)
    if not msg.several_recipients:
        return completion
    if result.decision in (Decision.PAUSE, Decision.OUTAGE):
        # Nothing reached anybody; a row too old to wait for the provider any longer
        # still ends sent if somebody got it on an earlier attempt.
        if not msg.settled or completion.status is Status.PENDING:
            return completion
        return settle_row(completion, dict(msg.settled), list(msg.pending_recipients))
    return per_recipient(msg, result, completion, ctx)


_RECIPIENT_OUTCOME = {Decision.SENT: Outcome.SENT, Decision.RETRY: Outcome.RETRY,
                      Decision.FAILED: Outcome.FAILED, Decision.UNKNOWN: Outcome.UNKNOWN}


def per_recipient(msg: ClaimedMessage, result: SendResult, completion: Completion,
                  ctx: Context) -> Completion:
    """Settle each recipient this attempt sent to, and the row with them.

    A recipient the provider accepted is settled ``sent`` and never sent the message
    again; one refused for good is settled ``failed``; one refused for now (4yz)
    stays pending, and the row is tried again for it alone, under the usual retry
    policy. A recipient the result does not list shares the message's decision.
    Once somebody has the message, the row ends ``sent`` (with the reason
    ``partially_refused`` if anybody was refused), never failed or dead.
    """
    listed = {r.address: r for r in result.recipients}
    outcomes: list[RecipientOutcome] = []
    settled = dict(msg.settled)
    for address in msg.pending_recipients:
        own = listed.get(address)
        decision = own.decision if own is not None else result.decision
        kind = _RECIPIENT_OUTCOME.get(decision, Outcome.RETRY)
        if own is not None:
            outcomes.append(RecipientOutcome(address, kind, own.code, own.enhanced, own.text))
        else:
            outcomes.append(RecipientOutcome(address, kind, result.code, result.enhanced,
                                             result.text))
        if kind is Outcome.SENT:
            settled[address] = Settled.SENT.value
        elif kind is Outcome.FAILED:
            settled[address] = Settled.FAILED.value
    waiting = [o.address for o in outcomes if o.outcome in (Outcome.RETRY, Outcome.UNKNOWN)]
    completion = replace(completion, recipients=tuple(outcomes), settled=settled)
    if result.decision is Decision.SENT and waiting:
        # Sent to some, deferred for others: the row is retried for those alone.
        step = _next_try(msg, ctx)
        if not isinstance(step, GiveUp):
            return replace(completion, outcome=Outcome.PARTIAL, status=Status.PENDING,
                           delay_seconds=max(step.delay_seconds, result.retry_after or 0.0),
                           reason="recipients_deferred")
        completion = replace(completion, status=Status.DEAD, reason=step.reason)
    return settle_row(completion, settled, waiting)


def settle_row(completion: Completion, settled: dict[str, str],
               waiting: list[str]) -> Completion:
    """A row that someone received ends sent, whatever happened to the others.

    Recipients still waiting when the row gives up are settled ``dead``. A row
    nobody received keeps its status.
    """
    final = completion.status.is_final or completion.parked_after_unknown
    if final:
        for address in waiting:
            settled[address] = Settled.DEAD.value
    if not any(v == Settled.SENT.value for v in settled.values()):
        return replace(completion, settled=settled)
    refused = any(v != Settled.SENT.value for v in settled.values())
    if completion.status is Status.SENT or final:
        return replace(completion, status=Status.SENT, settled=settled, delay_seconds=None,
                       reason=PARTIALLY_REFUSED if refused else None)
    return replace(completion, settled=settled)


def _decide_message(
    msg: ClaimedMessage,
    result: SendResult,
    *,
    ctx: Context,
    pause_seconds: float,
    outage_seconds: float | None = None,
    window_left: float | None = None,
) -> Completion:
    """The row's next state after ``result``, as if the message had one recipient."""
    decision = result.decision
    base = _completion(
        msg, ctx, Outcome.SENT, Status.SENT,
        stage=result.stage,
        reply_code=result.code,
        enhanced_code=result.enhanced,
        reply_text=result.text,
        detail=result.detail,
        contact=_CONTACT.get(result.decision, Contact.ANSWERED),
        transport=result.transport or ctx.transport.name,
        # Built here, not by a copy: SENT is nearly every completion.
        provider_message_id=result.provider_id if decision is Decision.SENT else None,
    )
    if decision is Decision.SENT:
        return base
    if decision is Decision.FAILED:
        return _given_up(msg, replace(base, outcome=Outcome.FAILED, status=Status.FAILED,
                                      reason=result.reason))
    if result.waits_for is not None:
        return _waiting(msg, base, result, window_left)
    if decision is Decision.PAUSE:
        # A configuration error says nothing about this message: it goes back
        # uncharged, to be tried once the transport works again.
        return replace(base, outcome=Outcome.PAUSED, status=Status.PENDING,
                       delay_seconds=pause_seconds, uncharge=True, reason=result.reason)
    if decision is Decision.OUTAGE:
        return _outage(msg, base, result, outage_seconds or pause_seconds)
    # RETRY and UNKNOWN: resend later with the same Message-ID and key, so that
    # a provider that did accept the first copy can recognise the second.
    step = _next_try(msg, ctx)
    if isinstance(step, GiveUp):
        return _given_up(msg, replace(base, outcome=Outcome.DEAD, status=Status.DEAD,
                                      reason=step.reason))
    # A provider that asked for a delay (Retry-After) gets at least that.
    delay = max(step.delay_seconds, result.retry_after or 0.0)
    if decision is Decision.UNKNOWN:
        if window_left is not None and window_left > 0:
            # Resend while the provider still drops a copy: then it is delivered once.
            note = f"resend due inside the key window ({window_left:.0f}s left)"
            return replace(base, outcome=Outcome.UNKNOWN, status=Status.PENDING,
                           delay_seconds=min(delay, window_left), reason=result.reason,
                           detail=_noted(note, result.detail))
        if ctx.on_unknown is OnUnknown.HOLD:
            return replace(base, outcome=Outcome.UNKNOWN, status=Status.UNKNOWN,
                           reason=result.reason, detail=_noted(
                               "outside any key window; MAILOUT_ON_UNKNOWN=hold: parked "
                               "for review", result.detail))
        return replace(base, outcome=Outcome.UNKNOWN, status=Status.PENDING,
                       delay_seconds=delay, reason=result.reason, detail=_noted(
                           "outside any key window; MAILOUT_ON_UNKNOWN=resend: resend due, "
                           "may duplicate", result.detail))
    return replace(base, outcome=Outcome.RETRY, status=Status.PENDING,
                   delay_seconds=delay, reason=result.reason)


def _noted(note: str, detail: str | None) -> str:
    return note if not detail else f"{note}; {detail}"


def _outage(msg: ClaimedMessage, base: Completion, result: SendResult,
            delay: float) -> Completion:
    """The provider could not be reached: back to pending uncharged, unless too old."""
    if is_expired(msg.claimed_at, msg.expires_at):
        return _given_up(msg, replace(base, outcome=Outcome.DEAD, status=Status.DEAD,
                                      uncharge=True, reason="max_age"))
    return replace(base, outcome=Outcome.OUTAGE, status=Status.PENDING, uncharge=True,
                   delay_seconds=max(delay, result.retry_after or 0.0), reason=result.reason)


def _waiting(msg: ClaimedMessage, base: Completion, result: SendResult,
             window_left: float | None) -> Completion:
    """Pinned to the failover member that may have an earlier copy, and that member is
    down: back to pending uncharged, due when it may be probed, never past its key
    window. Says nothing about the transport as a whole: the worker pauses nothing."""
    base = replace(base, contact=Contact.NONE, uncharge=True)
    if is_expired(msg.claimed_at, msg.expires_at):
        return _given_up(msg, replace(base, outcome=Outcome.DEAD, status=Status.DEAD,
                                      reason="max_age"))
    delay = result.retry_after or 0.0
    if window_left is not None and window_left > 0:
        delay = min(delay, window_left)
    return replace(base, outcome=Outcome.WAITING, status=Status.PENDING, delay_seconds=delay,
                   reason=result.reason)


def _given_up(msg: ClaimedMessage, completion: Completion) -> Completion:
    """Failed or dead, unless an earlier attempt may have delivered it.

    After an unknown outcome, a refusal or a give-up does not prove the recipient got
    nothing: such a row is parked in ``unknown`` for review instead, so that ``failed``
    and ``dead`` always mean "not delivered". The attempt log keeps the real outcome.
    """
    if msg.unknown_attempts == 0:
        return completion
    return replace(completion, status=Status.UNKNOWN, parked_after_unknown=True)


def expired(msg: ClaimedMessage, ctx: Context) -> Completion:
    """A claimed message already past its age limit: dead without a send (sent, if
    some of its recipients got it on an earlier attempt)."""
    completion = _given_up(msg, _completion(
        msg, ctx, Outcome.DEAD, Status.DEAD, reason="max_age",
        detail="past its age limit when claimed", uncharge=True,  # nothing was sent
    ))
    if not msg.settled:
        return completion
    return settle_row(completion, dict(msg.settled), list(msg.pending_recipients))


def parked(msg: ClaimedMessage, ctx: Context, note: str) -> Completion:
    """A message an earlier attempt may have delivered, under on_unknown=hold and
    outside any key window: parked for review, not sent again.

    Nothing is sent, so the claim's attempt is given back (uncharged); the decision
    is logged with ``note`` (outcome ``parked``), so the attempt log says why.
    """
    return _completion(
        msg, ctx, Outcome.PARKED, Status.UNKNOWN,
        reason="lease_expired" if msg.reclaimed else "unknown_held", uncharge=True,
        detail=note,
    )


def _guarded(msg: ClaimedMessage, ctx: Context, verdict: Verdict) -> Completion:
    """The completion for a message a send-time guard stopped."""
    base = _completion(msg, ctx, Outcome.CANCELLED, Status.CANCELLED, uncharge=True)
    if isinstance(verdict, Cancel):
        return replace(base, reason=verdict.reason, detail=verdict.detail)
    if isinstance(verdict, Hold):
        # Not this worker's to judge: back to pending, uncharged and unlogged, for a
        # worker that knows the schema (or this one after its deploy).
        return replace(base, outcome=Outcome.HELD, status=Status.PENDING,
                       reason="unknown_schema", detail=verdict.detail,
                       delay_seconds=SCHEMA_RECHECK_SECONDS, logged=False)
    assert isinstance(verdict, Retry)
    step = _next_try(msg, ctx)
    retry = replace(base, outcome=Outcome.RETRY, uncharge=False, reason="check_failed",
                    detail=verdict.detail)
    if isinstance(step, GiveUp):
        return replace(retry, outcome=Outcome.DEAD, status=Status.DEAD, reason=step.reason)
    return replace(retry, status=Status.PENDING, delay_seconds=step.delay_seconds)


async def _verdict(msg: ClaimedMessage, ctx: Context) -> Verdict:
    if ctx.guards is None:
        return Proceed(msg)
    if ctx.guards.needs_database_for(msg):
        return await asyncio.to_thread(ctx.guards.verdict, msg, ctx.engine)
    return ctx.guards.verdict(msg, None)


def render_failed(msg: ClaimedMessage, ctx: Context, error: RenderError) -> Completion:
    return _completion(
        msg, ctx, Outcome.FAILED, Status.FAILED, reason="render_error",
        # The error may quote an address: masked as MAILOUT_LOG_RECIPIENTS says.
        detail=redact_addresses(str(error), ctx.log_recipients)[:200],
    )


def crashed(msg: ClaimedMessage, ctx: Context, error: BaseException, *,
            handed_over: bool) -> Completion:
    """The completion for an attempt that raised where no exception was expected.

    A charged retry under the retry policy (so a message that always crashes ends
    ``dead`` at ``max_attempts``, with an alert); ``unknown`` when the content may
    already have been handed to the transport. Never left to lease expiry.
    """
    step = _next_try(msg, ctx)
    base = _completion(
        msg, ctx, Outcome.UNKNOWN if handed_over else Outcome.RETRY, Status.PENDING,
        reason="internal_error", detail=f"{type(error).__name__}: {error}"[:200],
    )
    if isinstance(step, GiveUp):
        return _given_up(msg, replace(base, outcome=Outcome.DEAD, status=Status.DEAD,
                                      reason=step.reason))
    return replace(base, delay_seconds=step.delay_seconds)


def _render(msg: ClaimedMessage, ctx: Context) -> Envelope:
    """Render ``msg``. Any error is a RenderError: the message cannot be sent as it is.
    (The renderer's wire form, built later inside the transport, raises RenderError
    too, so the envelope is used as it comes, without a copy.)"""
    try:
        return ctx.renderer.render(msg)
    except RenderError:
        raise
    except Exception as exc:  # a renderer bug on odd input: permanent for this message
        raise RenderError(msg.template, f"{type(exc).__name__}: {exc}") from exc


async def run(msg: ClaimedMessage, ctx: Context, *, pause_seconds: float,
              outage_seconds: float | None = None,
              on_send: Callable[[], None] | None = None) -> Completion:
    """Attempt ``msg`` once and return how it ended. Raises only on cancellation.

    Every error ends the attempt with a decision: a render or validation error
    (also one raised while the transport builds the wire form) ``failed`` with
    ``render_error``; an unexpected error in a guard, a charged retry; an unexpected
    error from the transport, :func:`crashed`.

    Under an OpenTelemetry SDK the attempt is a ``send`` span linked to the row's
    enqueue (:mod:`mailout.support.tracing`); without one, a cached check and no more.
    """
    if tracing.tracer() is None:
        return await _attempt(msg, ctx, pause_seconds, outage_seconds, on_send)
    with tracing.sending(msg, ctx.transport.name, ctx.trace_recipients_key) as span:
        completion = await _attempt(msg, ctx, pause_seconds, outage_seconds, on_send)
        tracing.finished(span, completion)
        return completion


async def _attempt(msg: ClaimedMessage, ctx: Context, pause_seconds: float,
                   outage_seconds: float | None,
                   on_send: Callable[[], None] | None) -> Completion:
    resend: Resend | None = None
    if msg.unknown_since is not None:  # an earlier attempt may have delivered it
        plan = after_unknown(msg, ctx.transport, ctx.on_unknown)
        if isinstance(plan, Park):
            return parked(msg, ctx, plan.note)
        resend = plan
    if is_expired(msg.claimed_at, msg.expires_at):
        return expired(msg, ctx)
    try:
        verdict = await _verdict(msg, ctx)
    except Exception as exc:  # a bug in a guard: retry, charged, never send unchecked
        log.error("guard crashed id=%s key=%s: %s", msg.id, msg.key, type(exc).__name__,
                  extra={"event": "guard_crashed", "outbox_id": msg.id, "key": msg.key,
                         "error": type(exc).__name__})
        return _guarded(msg, ctx, Retry(f"{type(exc).__name__} in a send-time check"))
    if not isinstance(verdict, Proceed):
        # The verdict may quote an address or an application's exception text.
        log.info("guard stopped id=%s key=%s: %s", msg.id, msg.key,
                 redact_addresses(str(verdict), ctx.log_recipients),
                 extra={"event": "guard_stopped", "outbox_id": msg.id, "key": msg.key})
        return _guarded(msg, ctx, verdict)
    msg = verdict.message
    if msg.has_attachments and ctx.load_attachments is not None:
        try:
            loaded = await asyncio.to_thread(ctx.load_attachments, msg.id)
        except (OperationalError, DBAPIError) as exc:  # the database, not the message
            return _guarded(msg, ctx, Retry(f"could not read its attachments: "
                                            f"{type(exc).__name__}"))
        msg = replace(msg, attachments=loaded)
    started = time.monotonic()
    try:
        with tracing.step("render", ctx.trace_steps):
            envelope = _render(msg, ctx)
        if on_send is not None:
            on_send()  # from here on, a cancelled attempt's outcome is unknown
        with tracing.step("transport", ctx.trace_steps):
            result = await (resend.transport if resend is not None
                            else ctx.transport).send(envelope)
    except RenderError as exc:
        log.error("render failed id=%s key=%s template=%s: %s", msg.id, msg.key,
                  msg.template, redact_addresses(exc.reason, ctx.log_recipients),
                  extra={"event": "render_failed", "outbox_id": msg.id, "key": msg.key,
                         "template": msg.template})
        return render_failed(msg, ctx, exc)
    except Exception as exc:  # a transport bug: it may have sent, so not "failed"
        log.error("transport crashed id=%s key=%s: %s", msg.id, msg.key, type(exc).__name__,
                  extra={"event": "transport_crashed", "outbox_id": msg.id, "key": msg.key,
                         "error": type(exc).__name__})
        return crashed(msg, ctx, exc, handed_over=True)
    _, window = key_window(ctx.transport, result.transport or ctx.transport.name)
    left = window_left(window, msg.unknown_since or msg.claimed_at, msg.claimed_at)
    completion = decide(msg, result, ctx=ctx, pause_seconds=pause_seconds,
                        outage_seconds=outage_seconds, window_left=left)
    if resend is not None:
        completion = replace(completion, detail=described(resend, completion.outcome,
                                                          completion.detail))
    if verdict.redirected_to is not None:
        completion = replace(completion, redirected_to=verdict.redirected_to)
    ctx.send_log.add(msg, completion, stage=result.stage or ctx.transport.name,
                     seconds=time.monotonic() - started)
    return completion
