"""SendGrid's event webhook (ECDSA signatures) over real HTTP: the receivers' contract."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from bench.support import webhooks as w

from tests.integration.webhooks.cases import Built, Case, tamper
from tests.integration.webhooks.receiving import TimedReceiverContract


def sendgrid_case(keys: w.SendgridKeys) -> Case:
    def bounce(rcpt: str, pid: str, mid: str, at: float | None = None) -> Built:
        body = json.dumps([{"email": rcpt, "timestamp": int(time.time()), "event": "bounce",
                            "type": "bounce", "status": "5.1.1",
                            "reason": "550 5.1.1 The email account does not exist",
                            "sg_event_id": uuid.uuid4().hex, "smtp-id": mid,
                            "sg_message_id": f"{pid}.filterdrecv-5bd6f7c8-abcde-1-0"}]).encode()
        return body, keys.sign(body, at)

    def redeliver(built: Built) -> Built:
        return built[0], keys.sign(built[0], time.time() + 1)

    def forge(built: Built) -> Built:
        return tamper(built[0]), built[1]

    return Case("sendgrid", bounce, redeliver, forge,
                lambda r, p, m: bounce(r, p, m, at=time.time() - 3600), replay_refused=True)


@pytest.fixture
def case(sendgrid_keys: w.SendgridKeys) -> Case:
    return sendgrid_case(sendgrid_keys)


class TestSendGridReceiver(TimedReceiverContract):
    """The contract, for sendgrid."""
