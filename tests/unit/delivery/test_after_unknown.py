"""After an unknown attempt: resend inside the transport's key window, else the policy.

Pure: real in-memory transports declaring a window, claimed messages built by hand.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from mailout.delivery.after_unknown import Park, Resend, after_unknown, key_window, window_left
from mailout.delivery.attempt import Context, decide
from mailout.delivery.policy import RetryPolicy
from mailout.message.render import Renderer
from mailout.models import ClaimedMessage, Contact, OnUnknown, Outcome, Status
from mailout.transports.base import Decision, SendResult, Transport
from mailout.transports.memory import MemoryTransport
from mailout.transports.multi import Mode, MultiTransport
from tests.unit.transports.test_multi import envelope

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


def resend_plan(plan: Resend | Park) -> Resend:
    assert isinstance(plan, Resend), plan
    return plan


def parked(plan: Resend | Park) -> bool:
    return isinstance(plan, Park)


def test_inside_the_window_the_resend_goes_out_even_under_hold() -> None:
    plan = resend_plan(after_unknown(msg(3600), RESEND, OnUnknown.HOLD))
    assert plan.transport is RESEND
    assert plan.note == "after unknown: inside resend's 86400s key window (79200s left)"


def test_past_the_window_the_policy_decides_and_says_so() -> None:
    park = after_unknown(msg(DAY), RESEND, OnUnknown.HOLD)
    assert isinstance(park, Park)
    assert park.note == ("after unknown: past resend's 86400s key window; "
                         "MAILOUT_ON_UNKNOWN=hold: parked for review, not sent")
    plan = resend_plan(after_unknown(msg(DAY), RESEND, OnUnknown.RESEND))
    assert "past resend's 86400s key window" in plan.note


def test_the_margin_keeps_a_resend_out_of_the_windows_last_stretch() -> None:
    # 23 h 30 min after the first attempt: inside 24 h, but not with an hour to spare.
    assert parked(after_unknown(msg(DAY - 1800), RESEND, OnUnknown.HOLD))
    assert window_left(DAY, NOW - timedelta(hours=1), NOW) == DAY - 3600 - 3600


def test_without_key_support_the_policy_decides() -> None:
    no_key = msg(10, via="postmark")
    assert parked(after_unknown(no_key, NO_KEY, OnUnknown.HOLD))
    plan = resend_plan(after_unknown(no_key, NO_KEY, OnUnknown.RESEND))
    assert "postmark drops no repeated key" in plan.note


def test_an_unknown_through_another_transport_is_not_covered_by_this_ones_window() -> None:
    assert key_window(RESEND, "smtp") == ("smtp", None)  # MAILOUT_TRANSPORT changed
    assert key_window(RESEND, "*") == ("*", None)  # several transports had it
    assert parked(after_unknown(msg(10, via="smtp"), RESEND, OnUnknown.HOLD))


@pytest.mark.parametrize("policy", list(OnUnknown))
def test_under_failover_the_resend_is_pinned_to_the_member_that_had_it(
        policy: OnUnknown) -> None:
    a, b = MemoryTransport(name="resend", dedupe_window=DAY), MemoryTransport(name="smtp")
    multi = MultiTransport(Mode.FAILOVER, [("resend", a), ("smtp", b)])
    plan = resend_plan(after_unknown(msg(60, via="resend"), multi, policy))
    assert plan.transport is not multi  # a route: that member only
    assert plan.only == "resend"
    # An unknown through the member without a key: the policy decides.
    assert parked(after_unknown(msg(60, via="smtp"), multi, policy)) == (
        policy is OnUnknown.HOLD)
    # Which member had it is not known (a killed worker): never covered.
    assert parked(after_unknown(msg(60, via="failover"), multi, policy)) == (
        policy is OnUnknown.HOLD)


@pytest.mark.parametrize("policy", list(OnUnknown))
async def test_a_pinned_route_never_hands_the_message_to_another_member(
        policy: OnUnknown) -> None:
    a, b = MemoryTransport(name="resend", dedupe_window=DAY), MemoryTransport(name="smtp")
    a.answer_always(SendResult(Decision.PAUSE, "unauthorized", stage="http", code=401))
    multi = MultiTransport(Mode.FAILOVER, [("resend", a), ("smtp", b)])
    plan = resend_plan(after_unknown(msg(60, via="resend"), multi, policy))
    first = await plan.transport.send(envelope())  # asks A, which goes down
    assert (first.decision, first.transport, first.waits_for) == (
        Decision.PAUSE, "resend", "resend")
    assert first.detail == "resend unauthorized; next try in 30s"
    second = await plan.transport.send(envelope())  # A is down: not even asked
    assert second.waits_for == "resend"
    assert second.detail == "resend is down (unauthorized), not asked; next try in 30s"
    assert len(a.attempts) == 1
    assert b.attempts == []
    assert (await multi.send(envelope("fresh"))).transport == "smtp"  # fresh mail flows


def test_a_pinned_send_that_waits_is_pending_uncharged_and_pauses_nothing() -> None:
    fresh = replace(msg(60), reclaimed=False)
    down = SendResult(Decision.PAUSE, "unauthorized", code=401, transport="resend",
                      waits_for="resend", retry_after=30.0)
    c = decide(fresh, down, ctx=ctx(RESEND), pause_seconds=600, window_left=20.0)
    assert (c.outcome, c.status, c.uncharge) == (Outcome.WAITING, Status.PENDING, True)
    assert c.contact is Contact.NONE  # the worker's breakers are not touched
    assert c.delay_seconds == 20.0  # never past the key window


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
