"""Resend's webhooks (Svix signatures) over real HTTP: the receivers' contract."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from bench.support import webhooks as w

from tests.integration.webhooks.cases import Built, Case, tamper
from tests.integration.webhooks.receiving import TimedReceiverContract


def _resend_bounce(rcpt: str, pid: str, mid: str, at: datetime | None = None,
                   msg_id: str | None = None) -> Built:
    doc = w.resend_event("email.bounced", rcpt, pid, bounce={
        "type": "Permanent", "subType": "General", "message": "550 5.1.1 user unknown"})
    return w.resend_request(doc, at=at, msg_id=msg_id)


def _resend_redeliver(built: Built) -> Built:
    body, headers = built
    return w.resend_request(json.loads(body), msg_id=headers["svix-id"],
                            at=datetime.now(UTC) + timedelta(seconds=1))


def _resend_forge(built: Built) -> Built:
    return tamper(built[0]), built[1]


RESEND = Case("resend", _resend_bounce, _resend_redeliver, _resend_forge,
              lambda r, p, m: _resend_bounce(r, p, m, at=datetime.now(UTC) - timedelta(hours=1)),
              replay_refused=True)


@pytest.fixture
def case() -> Case:
    return RESEND


class TestResendReceiver(TimedReceiverContract):
    """The contract, for resend."""
