"""attempt.decide: what a row becomes after each kind of send result. Pure, no I/O."""

from __future__ import annotations

import logging
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from mailout.delivery.attempt import Context, decide
from mailout.delivery.policy import RetryPolicy
from mailout.message.envelope import Envelope
from mailout.message.render import Renderer
from mailout.models import ClaimedMessage, Outcome, Status
from mailout.support.logs import LogRecipients, SendLog
from mailout.transports.base import CheckResult, Decision, SendResult

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


class _NoTransport:
    name = "none"

    async def send(self, envelope: Envelope) -> SendResult:
        raise AssertionError("decide must not send")

    async def check(self) -> CheckResult:
        raise AssertionError("decide must not check")

    async def close(self) -> None:
        return None


CTX = Context(worker="w", policy=RetryPolicy(base_seconds=10, cap_seconds=100, max_attempts=3),
              renderer=Renderer(None, mail_from="shop@example.com"), transport=_NoTransport(),
              rng=random.Random(1))


def msg(attempts: int = 1, expires_in: float = 3600) -> ClaimedMessage:
    return ClaimedMessage(
        id=1, key="k", queue="default", priority=0, recipient="a@example.com", sender=None,
        template=None, params=None, subject="s", text="t", html=None, headers=None,
        message_id="<m@x>", attempts=attempts, unknown_attempts=0, created_at=NOW,
        expires_at=NOW + timedelta(seconds=expires_in), lease_token="tok", claimed_at=NOW,
        reclaimed=False,
    )


OK = SendResult(Decision.SENT, "accepted", provider_id="4XYZ", stage="body", code=250,
                text="2.0.0 Ok: queued as 4XYZ")
SOFT = SendResult(Decision.RETRY, "transient_reply", stage="rcpt", code=451, enhanced="4.3.0",
                  text="4.3.0 later")
HARD = SendResult(Decision.FAILED, "recipient_rejected", stage="rcpt", code=550,
                  enhanced="5.1.1", text="5.1.1 no such user")
AUTH = SendResult(Decision.PAUSE, "bad_credentials", stage="auth", code=535, enhanced="5.7.8",
                  text="5.7.8 bad credentials")
LOST = SendResult(Decision.UNKNOWN, "lost_reply_after_data", stage="body",
                  detail="connection lost")
OUTAGE = SendResult(Decision.OUTAGE, "connect_refused", stage="connect")
THROTTLED = SendResult(Decision.RETRY, "rate_limited", stage="http", code=429, retry_after=500.0)


@pytest.mark.parametrize(
    ("result", "attempts", "expires_in", "status", "kind", "charged"),
    [
        (OK, 1, 3600, Status.SENT, Outcome.SENT, True),
        (HARD, 1, 3600, Status.FAILED, Outcome.FAILED, True),
        (SOFT, 1, 3600, Status.PENDING, Outcome.RETRY, True),
        (SOFT, 3, 3600, Status.DEAD, Outcome.DEAD, True),
        (SOFT, 1, -1, Status.DEAD, Outcome.DEAD, True),
        (LOST, 1, 3600, Status.PENDING, Outcome.UNKNOWN, True),
        (AUTH, 3, 3600, Status.PENDING, Outcome.PAUSED, False),
    ],
)
def test_decide(result: SendResult, attempts: int, expires_in: float,
                status: Status, kind: Outcome, charged: bool) -> None:
    c = decide(msg(attempts, expires_in), result, ctx=CTX, pause_seconds=30)
    assert (c.status, c.outcome, c.uncharge) == (status, kind, not charged)
    assert c.attempt == attempts
    assert c.lease_token == "tok"
    if status is Status.PENDING:
        assert c.delay_seconds is not None
        assert c.delay_seconds >= 0
    assert (c.reply_code, c.reply_text, c.stage) == (result.code, result.text, result.stage)
    if status not in (Status.DEAD, Status.SENT):
        assert c.reason == result.reason


def test_sent_keeps_the_provider_id() -> None:
    c = decide(msg(), OK, ctx=CTX, pause_seconds=30)
    assert c.provider_message_id == "4XYZ"


def test_dead_names_its_reason() -> None:
    assert decide(msg(3), SOFT, ctx=CTX, pause_seconds=30).reason == "max_attempts"
    assert decide(msg(1, -1), SOFT, ctx=CTX, pause_seconds=30).reason == "max_age"


def test_a_provider_retry_after_is_a_floor_on_the_backoff() -> None:
    c = decide(msg(), THROTTLED, ctx=CTX, pause_seconds=30)
    assert c.status is Status.PENDING
    assert c.delay_seconds == 500.0  # the policy alone would wait at most 10 s


def test_an_outage_returns_the_message_uncharged() -> None:
    c = decide(msg(), OUTAGE, ctx=CTX, pause_seconds=30, outage_seconds=5)
    assert (c.status, c.outcome, c.reason) == (Status.PENDING, Outcome.OUTAGE, "connect_refused")
    assert c.uncharge
    assert c.delay_seconds == 5
    assert c.logged  # the attempt row is kept, marked as not charged


def test_an_outage_never_kills_by_attempts_only_by_age() -> None:
    # far past max_attempts (3): still pending, uncharged
    c = decide(msg(attempts=50), OUTAGE, ctx=CTX, pause_seconds=30, outage_seconds=5)
    assert (c.status, c.uncharge) == (Status.PENDING, True)
    old = decide(msg(attempts=1, expires_in=-1), OUTAGE, ctx=CTX, pause_seconds=30,
                 outage_seconds=5)
    assert (old.status, old.outcome, old.reason) == (Status.DEAD, Outcome.DEAD, "max_age")


@pytest.mark.parametrize(("result", "attempts"), [(HARD, 1), (SOFT, 3)])
def test_a_give_up_after_an_unknown_outcome_is_parked_not_failed(
    result: SendResult, attempts: int
) -> None:
    from dataclasses import replace

    c = decide(replace(msg(attempts), unknown_attempts=1), result, ctx=CTX, pause_seconds=30)
    assert c.status is Status.UNKNOWN
    assert c.outcome in (Outcome.FAILED, Outcome.DEAD)  # the attempt log keeps the truth
    assert c.parked_after_unknown
    assert c.reason in ("recipient_rejected", "max_attempts")  # why it gave up, as it is
    assert c.row_reason == f"{c.reason}_after_unknown"  # what the row keeps (operations.md)


def test_an_attempts_lines_show_recipients_as_its_send_log_does() -> None:
    # One setting for every line about an attempt: a context cannot mask an address
    # in its guard and render lines and show it in the send line, or the reverse.
    full = replace(CTX, send_log=SendLog(logging.getLogger("t"), recipients=LogRecipients.FULL))
    assert full.log_recipients is LogRecipients.FULL
    assert CTX.log_recipients is LogRecipients.MASKED
