"""Amazon SES events through SNS (signed messages, certificates fetched from AWS's hosts
only) over real HTTP: the receivers' contract, and the subscription handshake."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from bench.support import webhooks as w

from tests.integration.webhooks.cases import Built, Case
from tests.integration.webhooks.receiving import Hook, TimedReceiverContract, stored


def ses_case(signer: w.SnsSigner, origin: str) -> Case:
    def bounce(rcpt: str, pid: str, mid: str, at: datetime | None = None) -> Built:
        doc = w.sns_notification(signer, origin, w.ses_bounce(rcpt, pid, message_id=mid),
                                 at=at)
        return json.dumps(doc).encode(), {"x-amz-sns-message-type": "Notification"}

    def redeliver(built: Built) -> Built:
        doc = json.loads(built[0])
        again = w.sns_notification(signer, origin, json.loads(doc["Message"]))
        return json.dumps(again).encode(), built[1]

    def forge(built: Built) -> Built:
        doc = json.loads(built[0])
        doc["Message"] = doc["Message"].replace("@", "@x", 1)
        return json.dumps(doc).encode(), built[1]

    def unsigned(built: Built) -> Built:
        doc = json.loads(built[0])
        del doc["Signature"]
        return json.dumps(doc).encode(), built[1]

    return Case("ses", bounce, redeliver, forge,
                lambda r, p, m: bounce(r, p, m, at=datetime.now(UTC) - timedelta(hours=3)),
                replay_refused=True, unsigned=unsigned)


@pytest.fixture
def case(sns: tuple[w.SnsSigner, w.CertServer]) -> Case:
    signer, cert_server = sns
    return ses_case(signer, cert_server.origin)


class TestSesReceiver(TimedReceiverContract):
    """The contract, for ses."""


def test_sns_subscription_is_confirmed_and_foreign_certificates_are_never_fetched(
        hook: Hook, sns: tuple[w.SnsSigner, w.CertServer]) -> None:
    signer, cert_server = sns
    before = cert_server.confirmations
    status, body = hook.post("ses", (json.dumps(w.sns_subscription(signer, cert_server.origin)
                                                ).encode(), {}))
    assert (status, body["confirmed"]) == (200, True)
    assert cert_server.confirmations == before + 1
    doc = w.sns_notification(signer, cert_server.origin, w.ses_bounce("z@example.com", "s1"))
    doc["SigningCertURL"] = "https://sns.eu-west-1.amazonaws.com.evil.example/cert.pem"
    status, body = hook.post("ses", (json.dumps(doc).encode(), {}))
    assert (status, body["error"]) == (401, "bad_signature")
    assert "SigningCertURL" in body["reason"]
    other = w.sns_notification(signer, cert_server.origin, w.ses_bounce("z@example.com", "s1"),
                               topic="arn:aws:sns:eu-west-1:999999999999:someone-else")
    status, body = hook.post("ses", (json.dumps(other).encode(), {}))
    assert (status, body["error"]) == (403, "forbidden_topic")
    v1 = w.sns_notification(signer, cert_server.origin, w.ses_bounce("v1@example.com", "s2"),
                            version="1")
    assert hook.post("ses", (json.dumps(v1).encode(), {}))[0] == 200
    assert [e["recipient"] for e in stored(hook.engine)] == ["v1@example.com"]
