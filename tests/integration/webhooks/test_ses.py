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


@pytest.mark.parametrize("url", ["https://sns.s3.amazonaws.com/cert.pem",
                                 "https://sns.s3-us-west-2.amazonaws.com/cert.pem",
                                 "https://sns.s3.eu-west-1.amazonaws.com/cert.pem"])
def test_s3_bucket_hosts_are_not_sns_hosts(hook: Hook, sns: tuple[w.SnsSigner, w.CertServer],
                                           url: str) -> None:
    # Anyone can make a bucket named "sns" and serve a certificate of their own from it.
    signer, cert_server = sns
    doc = w.sns_notification(signer, cert_server.origin, w.ses_bounce("z@example.com", "s1"))
    doc["SigningCertURL"] = url
    status, body = hook.post("ses", (json.dumps(doc).encode(), {}))
    assert (status, body["error"]) == (401, "bad_signature")
    assert "SigningCertURL" in body["reason"]


@pytest.mark.parametrize("host", ["sns.us-east-1.amazonaws.com", "sns.eu-west-1.amazonaws.com",
                                  "sns.ap-southeast-2.amazonaws.com",
                                  "sns.us-gov-west-1.amazonaws.com",
                                  "sns.cn-north-1.amazonaws.com.cn"])
def test_real_sns_region_hosts_are_accepted(host: str) -> None:
    from mailout.webhooks.ses import SNS_HOST

    assert SNS_HOST.fullmatch(host)


def test_a_certificate_not_issued_to_sns_is_refused(
        hook: Hook, sns: tuple[w.SnsSigner, w.CertServer]) -> None:
    signer, cert_server = sns
    cert_server.signer = impostor = w.SnsSigner(common_name="shop.example")
    try:  # the server is shared by the session's tests: its own signer goes back after
        doc = w.sns_notification(impostor, cert_server.origin,
                                 w.ses_bounce("z@example.com", "s1"))
        status, body = hook.post("ses", (json.dumps(doc).encode(), {}))
    finally:
        cert_server.signer = signer
    assert (status, body["error"]) == (401, "bad_signature")
    assert "sns.amazonaws.com" in body["reason"]
    assert stored(hook.engine) == []


def test_a_failed_certificate_fetch_is_not_repeated_for_every_request(
        hook: Hook, sns: tuple[w.SnsSigner, w.CertServer]) -> None:
    signer, cert_server = sns
    before = cert_server.missing_fetches  # the server outlives the test
    for _ in range(5):
        doc = w.sns_notification(signer, cert_server.origin, w.ses_bounce("z@example.com", "s"))
        doc["SigningCertURL"] = f"{cert_server.origin}/missing.pem"
        status, body = hook.post("ses", (json.dumps(doc).encode(), {}))
        assert (status, body["error"]) == (503, "certificate_unavailable")
    assert cert_server.missing_fetches == before + 1
