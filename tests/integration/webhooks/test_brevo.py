"""Brevo's webhooks (a bearer token) over real HTTP: the receivers' contract."""

from __future__ import annotations

import json
import time

import pytest
from bench.support import webhooks as w

from tests.integration.webhooks.cases import Built, Case
from tests.integration.webhooks.receiving import ReceiverContract


def _brevo_bounce(rcpt: str, pid: str, mid: str) -> Built:
    doc = {"event": "hard_bounce", "email": rcpt, "id": 123456, "date": "2025-01-20 10:00:00",
           "ts": int(time.time()), "message-id": mid, "ts_event": int(time.time()),
           "ts_epoch": int(time.time() * 1000), "subject": "Your order",
           "reason": "550 5.1.1 user unknown", "sending_ip": "203.0.113.7"}
    return json.dumps(doc).encode(), {"Authorization": f"Bearer {w.BREVO_TOKEN}"}


BREVO = Case("brevo", _brevo_bounce, lambda b: b,
             lambda b: (b[0], {"Authorization": "Bearer not-the-token-0000000"}), None,
             replay_refused=False)


@pytest.fixture
def case() -> Case:
    return BREVO


class TestBrevoReceiver(ReceiverContract):
    """The contract, for brevo."""
