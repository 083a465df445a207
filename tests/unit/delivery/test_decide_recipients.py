"""attempt.decide for messages to several recipients: each recipient is settled on
its own, deferred ones alone are retried, and a row someone received ends sent."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from mailout.delivery.attempt import decide, expired
from mailout.models import Mailbox, Outcome, Status
from mailout.transports.base import Decision, RecipientResult, SendResult
from tests.unit.delivery.test_decide import CTX, NOW, msg

A, B, C = "a@example.com", "b@example.com", "c@example.com"


def several(attempts: int = 1, settled: dict[str, str] | None = None, expires_in: float = 3600):
    base = msg(attempts=attempts, expires_in=expires_in)
    return dataclasses.replace(base, to=(Mailbox(A), Mailbox(B)), cc=(Mailbox(C),),
                               settled=settled or {})


def rcpt(address: str, decision: Decision, code: int) -> RecipientResult:
    return RecipientResult(address, decision, code, f"{code // 100}.0.0", "words")


def sent(*recipients: RecipientResult) -> SendResult:
    return SendResult(Decision.SENT, "accepted", provider_id="P1", stage="body", code=250,
                      recipients=recipients)


def test_everyone_accepted_is_sent_with_no_mark() -> None:
    done = decide(several(), sent(), ctx=CTX, pause_seconds=1)
    assert (done.status, done.reason, done.outcome) == (Status.SENT, None, Outcome.SENT)
    assert done.settled == {A: "sent", B: "sent", C: "sent"}
    assert [(r.address, r.outcome) for r in done.recipients] == [
        (A, Outcome.SENT), (B, Outcome.SENT), (C, Outcome.SENT)]


def test_a_refusal_for_good_marks_the_sent_row() -> None:
    done = decide(several(), sent(rcpt(A, Decision.SENT, 250), rcpt(B, Decision.FAILED, 550),
                                  rcpt(C, Decision.SENT, 250)), ctx=CTX, pause_seconds=1)
    assert (done.status, done.reason) == (Status.SENT, "partially_refused")
    assert done.settled == {A: "sent", B: "failed", C: "sent"}
    assert done.provider_message_id == "P1"


def test_a_deferred_recipient_is_retried_alone() -> None:
    done = decide(several(), sent(rcpt(A, Decision.SENT, 250), rcpt(B, Decision.FAILED, 550),
                                  rcpt(C, Decision.RETRY, 451)), ctx=CTX, pause_seconds=1)
    assert (done.status, done.outcome, done.reason) == (Status.PENDING, Outcome.PARTIAL,
                                                        "recipients_deferred")
    assert done.delay_seconds is not None
    assert done.settled == {A: "sent", B: "failed"}
    retry = several(attempts=2, settled=done.settled)
    assert retry.pending_recipients == (C,)
    final = decide(retry, sent(), ctx=CTX, pause_seconds=1)
    assert (final.status, final.reason) == (Status.SENT, "partially_refused")
    assert final.settled == {A: "sent", B: "failed", C: "sent"}
    assert [(r.address, r.outcome) for r in final.recipients] == [(C, Outcome.SENT)]


def test_giving_up_on_a_deferred_recipient_after_a_delivery_ends_sent() -> None:
    last = several(attempts=3, settled={A: "sent", B: "sent"})
    soft = SendResult(Decision.RETRY, "transient_reply", stage="rcpt", code=451)
    done = decide(last, soft, ctx=CTX, pause_seconds=1)
    assert (done.status, done.reason) == (Status.SENT, "partially_refused")
    assert done.settled == {A: "sent", B: "sent", C: "dead"}
    assert done.outcome is Outcome.DEAD  # the attempt log keeps what this attempt was


def test_nobody_accepting_keeps_the_message_rules() -> None:
    hard = SendResult(Decision.FAILED, "recipient_rejected", stage="rcpt", code=550,
                      recipients=(rcpt(A, Decision.FAILED, 550), rcpt(B, Decision.FAILED, 550),
                                  rcpt(C, Decision.FAILED, 553)))
    done = decide(several(), hard, ctx=CTX, pause_seconds=1)
    assert (done.status, done.reason) == (Status.FAILED, "recipient_rejected")
    mixed = SendResult(Decision.RETRY, "transient_reply", stage="rcpt", code=451,
                       recipients=(rcpt(A, Decision.FAILED, 550), rcpt(B, Decision.RETRY, 451),
                                   rcpt(C, Decision.RETRY, 452)))
    later = decide(several(), mixed, ctx=CTX, pause_seconds=1)
    assert later.status is Status.PENDING
    assert later.settled == {A: "failed"}


def test_a_pause_settles_nobody() -> None:
    pause = SendResult(Decision.PAUSE, "bad_credentials", stage="auth", code=535)
    done = decide(several(), pause, ctx=CTX, pause_seconds=5)
    assert (done.status, done.recipients, done.settled) == (Status.PENDING, (), None)


def test_one_recipient_is_not_tracked_per_recipient() -> None:
    done = decide(msg(), sent(), ctx=CTX, pause_seconds=1)
    assert (done.recipients, done.settled) == ((), None)


def test_expiring_after_a_delivery_ends_sent() -> None:
    late = dataclasses.replace(several(settled={A: "sent"}),
                               expires_at=NOW - timedelta(seconds=1))
    done = expired(late, CTX)
    assert (done.status, done.reason) == (Status.SENT, "partially_refused")
    assert done.settled == {A: "sent", B: "dead", C: "dead"}
