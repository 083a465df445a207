"""After an unknown attempt: resend inside the transport's key window, else the policy.

Pure: real in-memory transports declaring a window, claimed messages built by hand.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from mailout.delivery.after_unknown import after_unknown, key_window, window_left
from mailout.delivery.attempt import Context, decide
from mailout.delivery.policy import RetryPolicy
from mailout.message.render import Renderer
from mailout.models import ClaimedMessage, OnUnknown, Outcome, Status
from mailout.transports.base import Decision, SendResult, Transport
from mailout.transports.memory import MemoryTransport
from mailout.transports.multi import Mode, MultiTransport

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
DAY = 86400.0


def ctx(transport: Transport, on_unknown: OnUnknown = OnUnknown.RESEND) -> Context:
    return Context(worker="w", policy=RetryPolicy(base_seconds=10, cap_seconds=100,
                                                  max_attempts=5),
                   renderer=Renderer(None, mail_from="shop@example.com"),
                   transport=transport, rng=random.Random(1), on_unknown=on_unknown)


def msg(unknown_ago: float | None, via: str | None = "resend") -> ClaimedMessage:
    return ClaimedMessage(
        id=1, key="k", queue="default", priority=0, recipient="a@example.com", sender=None,
        template=None, params=None, subject="s", text="t", html=None, headers=None,
        message_id="<m@x>", attempts=2, unknown_attempts=1, created_at=NOW,
        expires_at=None, lease_token="tok", claimed_at=NOW, reclaimed=True,
        unknown_since=None if unknown_ago is None else NOW - timedelta(seconds=unknown_ago),
        unknown_via=via)


RESEND = MemoryTransport(name="resend", dedupe_window=DAY)
NO_KEY = MemoryTransport(name="postmark")


def test_inside_the_window_the_resend_goes_out_even_under_hold() -> None:
    plan = after_unknown(msg(3600), RESEND, OnUnknown.HOLD)
    assert plan is not None
    assert plan.transport is RESEND
    assert "inside resend's 86400s key window" in plan.note


def test_past_the_window_the_policy_decides() -> None:
    assert after_unknown(msg(DAY), RESEND, OnUnknown.HOLD) is None
    plan = after_unknown(msg(DAY), RESEND, OnUnknown.RESEND)
    assert plan is not None
    assert "past resend's 86400s key window" in plan.note


def test_the_margin_keeps_a_resend_out_of_the_windows_last_stretch() -> None:
    # 23 h 30 min after the first attempt: inside 24 h, but not with an hour to spare.
    assert after_unknown(msg(DAY - 1800), RESEND, OnUnknown.HOLD) is None
    assert window_left(DAY, NOW - timedelta(hours=1), NOW) == DAY - 3600 - 3600


def test_without_key_support_the_policy_decides() -> None:
    no_key = msg(10, via="postmark")
    assert after_unknown(no_key, NO_KEY, OnUnknown.HOLD) is None
    plan = after_unknown(no_key, NO_KEY, OnUnknown.RESEND)
    assert plan is not None
    assert "postmark drops no repeated key" in plan.note


def test_an_unknown_through_another_transport_is_not_covered_by_this_ones_window() -> None:
    assert key_window(RESEND, "smtp") == ("smtp", None)  # MAILOUT_TRANSPORT changed
    assert key_window(RESEND, "*") == ("*", None)  # several transports had it
    assert after_unknown(msg(10, via="smtp"), RESEND, OnUnknown.HOLD) is None


def test_under_failover_the_resend_is_pinned_to_the_member_that_had_it() -> None:
    a, b = MemoryTransport(name="resend", dedupe_window=DAY), MemoryTransport(name="smtp")
    multi = MultiTransport(Mode.FAILOVER, [("resend", a), ("smtp", b)])
    plan = after_unknown(msg(60, via="resend"), multi, OnUnknown.HOLD)
    assert plan is not None
    assert plan.transport is not multi  # a route: that member only
    # An unknown through the member without a key, under hold: parked.
    assert after_unknown(msg(60, via="smtp"), multi, OnUnknown.HOLD) is None
    # Which member had it is not known (a killed worker): never covered.
    assert after_unknown(msg(60, via="failover"), multi, OnUnknown.HOLD) is None


async def test_a_pinned_route_never_hands_the_message_to_another_member() -> None:
    a, b = MemoryTransport(name="resend", dedupe_window=DAY), MemoryTransport(name="smtp")
    a.answer_always(SendResult(Decision.OUTAGE, "connect_failed"))
    multi = MultiTransport(Mode.FAILOVER, [("resend", a), ("smtp", b)])
    plan = after_unknown(msg(60, via="resend"), multi, OnUnknown.HOLD)
    assert plan is not None
    from tests.unit.transports.test_multi import envelope

    result = await plan.transport.send(envelope())
    assert (result.decision, result.transport) == (Decision.OUTAGE, "resend")
    assert b.attempts == []


def test_an_unknown_outcome_inside_a_window_is_resent_in_time_not_parked() -> None:
    fresh = replace(msg(None), reclaimed=False)
    lost = SendResult(Decision.UNKNOWN, "timeout_after_request", stage="response")
    held = decide(fresh, lost, ctx=ctx(RESEND, OnUnknown.HOLD), pause_seconds=1,
                  window_left=30.0)
    assert (held.outcome, held.status) == (Outcome.UNKNOWN, Status.PENDING)
    assert held.delay_seconds is not None
    assert held.delay_seconds <= 30.0
    parked = decide(fresh, lost, ctx=ctx(NO_KEY, OnUnknown.HOLD), pause_seconds=1)
    assert parked.status is Status.UNKNOWN
