"""attempt.decide: what a row becomes after each kind of outcome. Pure, no I/O."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from mailout.attempt import Context, decide
from mailout.models import ClaimedMessage, Outcome, Status
from mailout.policy import RetryPolicy
from mailout.render import Renderer
from mailout.transports.base import Envelope, Failure, Reply, SendOutcome, Stage
from mailout.transports.smtp.classify import Action, Decision

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


class _NoTransport:
    async def send(self, envelope: Envelope) -> SendOutcome:
        raise AssertionError("decide must not send")

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


OK = SendOutcome(Stage.BODY, Reply(250, "2.0.0 Ok: queued as 4XYZ"))
SOFT = SendOutcome(Stage.RCPT, Reply(451, "4.3.0 later", "4.3.0"), Failure.REPLY)
HARD = SendOutcome(Stage.RCPT, Reply(550, "5.1.1 no such user", "5.1.1"), Failure.REPLY)
AUTH = SendOutcome(Stage.AUTH, Reply(535, "5.7.8 bad credentials", "5.7.8"), Failure.REPLY)
LOST = SendOutcome(Stage.BODY, None, Failure.DISCONNECT, "connection lost")


@pytest.mark.parametrize(
    ("outcome", "action", "attempts", "expires_in", "status", "kind", "charged"),
    [
        (OK, Action.SENT, 1, 3600, Status.SENT, Outcome.SENT, True),
        (HARD, Action.FAIL, 1, 3600, Status.FAILED, Outcome.FAILED, True),
        (SOFT, Action.RETRY, 1, 3600, Status.PENDING, Outcome.RETRY, True),
        (SOFT, Action.RETRY, 3, 3600, Status.DEAD, Outcome.DEAD, True),
        (SOFT, Action.RETRY, 1, -1, Status.DEAD, Outcome.DEAD, True),
        (LOST, Action.UNKNOWN, 1, 3600, Status.PENDING, Outcome.UNKNOWN, True),
        (AUTH, Action.PAUSE, 3, 3600, Status.PENDING, Outcome.PAUSED, False),
    ],
)
def test_decide(outcome: SendOutcome, action: Action, attempts: int, expires_in: float,
                status: Status, kind: Outcome, charged: bool) -> None:
    c = decide(msg(attempts, expires_in), outcome, Decision(action, "r"), ctx=CTX,
               pause_seconds=30)
    assert (c.status, c.outcome, c.uncharge) == (status, kind, not charged)
    assert c.attempt == attempts
    assert c.lease_token == "tok"
    if status is Status.PENDING:
        assert c.delay_seconds is not None
        assert c.delay_seconds >= 0
    if outcome.reply:
        assert c.reply_code == outcome.reply.code
        assert c.reply_text == outcome.reply.text


def test_sent_keeps_the_provider_id() -> None:
    c = decide(msg(), OK, Decision(Action.SENT, "accepted"), ctx=CTX, pause_seconds=30)
    assert c.provider_message_id == "4XYZ"


def test_dead_names_its_reason() -> None:
    assert decide(msg(3), SOFT, Decision(Action.RETRY, "r"), ctx=CTX,
                  pause_seconds=30).reason == "max_attempts"
    assert decide(msg(1, -1), SOFT, Decision(Action.RETRY, "r"), ctx=CTX,
                  pause_seconds=30).reason == "expired"


@pytest.mark.parametrize(("outcome", "action", "attempts"),
                         [(HARD, Action.FAIL, 1), (SOFT, Action.RETRY, 3)])
def test_a_give_up_after_an_unknown_outcome_is_parked_not_failed(
    outcome: SendOutcome, action: Action, attempts: int
) -> None:
    from dataclasses import replace

    c = decide(replace(msg(attempts), unknown_attempts=1), outcome, Decision(action, "r"),
               ctx=CTX, pause_seconds=30)
    assert c.status is Status.UNKNOWN
    assert c.outcome in (Outcome.FAILED, Outcome.DEAD)  # the attempt log keeps the truth
    assert c.reason is not None
    assert c.reason.endswith("_after_unknown")
