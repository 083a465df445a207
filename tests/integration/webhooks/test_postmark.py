"""Postmark's webhooks (HTTP basic auth) over real HTTP: the receivers' contract."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest
from bench.support import webhooks as w

from tests.integration.webhooks.cases import Built, Case
from tests.integration.webhooks.receiving import ReceiverContract


def _postmark_bounce(rcpt: str, pid: str, mid: str) -> Built:
    doc = {"RecordType": "Bounce", "ID": int(time.time() * 1000) % 10**12,
           "Type": "HardBounce", "TypeCode": 1, "MessageID": pid, "Email": rcpt,
           "BouncedAt": datetime.now(UTC).isoformat(), "Description": "The server was "
           "unable to deliver your message (ex: unknown user, mailbox not found).",
           "Details": "smtp;550 5.1.1 user unknown", "MessageStream": "outbound"}
    return json.dumps(doc).encode(), w.basic(w.POSTMARK_AUTH)


POSTMARK = Case("postmark", _postmark_bounce, lambda b: b,
                lambda b: (b[0], w.basic("postmark:wrong-password")), None,
                replay_refused=False)


@pytest.fixture
def case() -> Case:
    return POSTMARK


class TestPostmarkReceiver(ReceiverContract):
    """The contract, for postmark."""
