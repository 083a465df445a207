"""Mailgun's webhooks (HMAC signatures) over real HTTP: the receivers' contract."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from bench.support import webhooks as w

from tests.integration.webhooks.cases import Built, Case
from tests.integration.webhooks.receiving import TimedReceiverContract


def _mailgun_data(rcpt: str, mid: str) -> dict[str, Any]:
    return {"id": uuid.uuid4().hex[:22], "event": "failed", "severity": "permanent",
            "reason": "bounce", "recipient": rcpt, "timestamp": time.time(),
            "log-level": "error", "message": {"headers": {"message-id": mid.strip("<>")}},
            "delivery-status": {"code": 550, "message": "5.1.1 user unknown",
                                "description": ""}}


def _mailgun_bounce(rcpt: str, pid: str, mid: str, at: float | None = None) -> Built:
    return w.mailgun_body(_mailgun_data(rcpt, mid), at=at), {}


def _mailgun_redeliver(built: Built) -> Built:
    return w.mailgun_body(json.loads(built[0])["event-data"], at=time.time() + 1), {}


def _mailgun_forge(built: Built) -> Built:
    doc = json.loads(built[0])
    return w.mailgun_body(doc["event-data"], key="key-not-the-right-one-000000000"), {}


def _mailgun_unsigned(built: Built) -> Built:
    doc = json.loads(built[0])
    del doc["signature"]
    return json.dumps(doc).encode(), {}


MAILGUN = Case("mailgun", _mailgun_bounce, _mailgun_redeliver, _mailgun_forge,
               lambda r, p, m: _mailgun_bounce(r, p, m, at=time.time() - 3600),
               replay_refused=True, unsigned=_mailgun_unsigned)


@pytest.fixture
def case() -> Case:
    return MAILGUN


class TestMailgunReceiver(TimedReceiverContract):
    """The contract, for mailgun."""
