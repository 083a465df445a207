"""The webhook receivers over real HTTP (uvicorn), storing into SQLite and PostgreSQL.

Every provider: a signed hard bounce is stored, linked and suppresses the address;
a forged copy is refused (401) and a stale one too; an exact replay of a signed
delivery is refused (400); the same event delivered again with a fresh signature is
stored once. Bad input gets a clear 4xx and stores nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, update

from mailout.db import events as event_sql
from mailout.db.schema import events, messages, suppressions
from mailout.outbox import EnqueueSettings, enqueue
from mailout.webhooks.app import create_app
from mailout.webhooks.handler import WebhookHandler
from mailout.webhooks.settings import WebhookSettings, svix_secret
from tests.integration import webhook_cases as cases
from tests.support import webhooks as w
from tests.support.tls import TestCerts


@pytest.fixture(scope="module")
def sendgrid_keys() -> w.SendgridKeys:
    return w.SendgridKeys()


@pytest.fixture(scope="module")
def sns(test_certs: TestCerts) -> Iterator[tuple[w.SnsSigner, w.CertServer]]:
    signer = w.SnsSigner()
    server = w.CertServer(test_certs, signer)
    yield signer, server
    server.close()


def settings_for(sendgrid_keys: w.SendgridKeys, cert_server: w.CertServer,
                 test_certs: TestCerts, **overrides: Any) -> WebhookSettings:
    values: dict[str, Any] = {
        "resend_secret": svix_secret("test", w.RESEND_SECRET),
        "postmark_auth": w.POSTMARK_AUTH, "ses_topics": frozenset({w.SES_TOPIC}),
        "sendgrid_key": sendgrid_keys.public_b64, "mailgun_key": w.MAILGUN_KEY.encode(),
        "brevo_token": w.BREVO_TOKEN, "brevo_auth": w.BREVO_AUTH,
        "sns_test_origin": cert_server.origin, "sns_test_ca_file": str(test_certs.ca_file),
        "bounce_rate_alert": None, "complaint_rate_alert": None, "max_bytes": 64 * 1024,
    }
    values.update(overrides)
    return WebhookSettings(**values)


@dataclass
class Hook:
    server: w.WebhookServer
    handler: WebhookHandler
    engine: Engine
    cases: dict[str, cases.Case]

    def post(self, provider: str, built: tuple[bytes, dict[str, str]]
             ) -> tuple[int, dict[str, Any]]:
        return w.post(f"{self.server.url}/{provider}", built[0], built[1])


@pytest.fixture
def hook(engine: Engine, sendgrid_keys: w.SendgridKeys,
         sns: tuple[w.SnsSigner, w.CertServer], test_certs: TestCerts) -> Iterator[Hook]:
    signer, cert_server = sns
    handler = WebhookHandler(engine, settings_for(sendgrid_keys, cert_server, test_certs))
    all_cases = {c.provider: c for c in (
        cases.RESEND, cases.POSTMARK, cases.MAILGUN, cases.BREVO,
        cases.sendgrid_case(sendgrid_keys), cases.ses_case(signer, cert_server.origin))}
    with w.serving(create_app(handler=handler)) as server:
        yield Hook(server, handler, engine, all_cases)


PROVIDERS = ["resend", "postmark", "ses", "sendgrid", "mailgun", "brevo"]


def sent_row(engine: Engine, to: str) -> tuple[int, str, str]:
    """An outbox row marked sent with a provider id: (row id, provider id, Message-ID)."""
    pid = f"pid-{uuid.uuid4().hex[:16]}"
    with engine.begin() as conn:
        result = enqueue(conn, to=to, subject="Your order", text="Thanks",
                         settings=EnqueueSettings(message_id_domain="shop.example"))
        conn.execute(update(messages).where(messages.c.id == result.id).values(
            status="sent", provider_message_id=pid, sent_at=func.now()))
    return result.id, pid, result.message_id


def stored(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(select(events).order_by(events.c.id))]


def suppressed(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(select(suppressions.c.address, suppressions.c.reason)).all())


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_signed_hard_bounce_is_stored_linked_and_suppresses(hook: Hook, provider: str) -> None:
    row_id, pid, mid = sent_row(hook.engine, "Gone@Example.com")
    status, body = hook.post(provider, hook.cases[provider].bounce("gone@example.com", pid, mid))
    assert (status, body["stored"], body["matched"], body["suppressed"]) == (200, 1, 1, 1)
    [event] = stored(hook.engine)
    assert (event["provider"], event["type"], event["subtype"]) == (provider, "bounced", "hard")
    assert event["outbox_id"] == row_id
    assert event["matched_by"] in ("provider_id", "message_id")
    assert event["recipient"] == "gone@example.com"
    assert event["payload"]
    assert len(event["payload"].encode()) <= 8192
    assert suppressed(hook.engine) == {"gone@example.com": "hard_bounce"}
    with hook.engine.connect() as conn:
        [record] = event_sql.events_for(conn, row_id)
    assert record.type == "bounced"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_forged_requests_are_refused_and_nothing_is_stored(hook: Hook, provider: str) -> None:
    _row, pid, mid = sent_row(hook.engine, "a@example.com")
    case = hook.cases[provider]
    status, body = hook.post(provider, case.forge(case.bounce("a@example.com", pid, mid)))
    assert status == 401, body
    assert body["error"] == "bad_signature"
    status, body = hook.post(provider, case.unsigned(case.bounce("a@example.com", pid, mid)))
    assert status == 401
    assert body["error"] in ("missing_auth", "bad_signature")
    assert stored(hook.engine) == []
    assert suppressed(hook.engine) == {}


@pytest.mark.parametrize("provider", [p for p in PROVIDERS if p not in ("postmark", "brevo")])
def test_stale_signatures_are_refused(hook: Hook, provider: str) -> None:
    case = hook.cases[provider]
    assert case.stale is not None
    status, body = hook.post(provider, case.stale("a@example.com", "pid-1", "<m@x>"))
    assert (status, body["error"]) == (401, "stale")
    assert stored(hook.engine) == []


@pytest.mark.parametrize("provider", PROVIDERS)
def test_replays_are_refused_and_redeliveries_are_stored_once(hook: Hook, provider: str) -> None:
    _row, pid, mid = sent_row(hook.engine, "b@example.com")
    case = hook.cases[provider]
    first = case.bounce("b@example.com", pid, mid)
    assert hook.post(provider, first)[0] == 200
    status, body = hook.post(provider, first)  # the exact same request again
    if case.replay_refused:
        assert (status, body["error"]) == (400, "replayed")
    else:  # nothing signed to tell a replay by: accepted, and stored once
        assert (status, body["stored"], body["duplicates"]) == (200, 0, 1)
    status, body = hook.post(provider, case.redeliver(first))
    assert (status, body["stored"], body["duplicates"]) == (200, 0, 1)
    assert len(stored(hook.engine)) == 1


def test_an_event_that_matches_no_row_is_kept_and_counted(hook: Hook) -> None:
    status, body = hook.post("resend", cases.RESEND.bounce("who@example.com", "pid-x", "<x@y>"))
    assert (status, body["stored"], body["matched"], body["unmatched"]) == (200, 1, 0, 1)
    [event] = stored(hook.engine)
    assert event["outbox_id"] is None
    with hook.engine.connect() as conn:
        assert ("resend", "bounced", False, 1) in event_sql.event_counts(conn)
    metrics = _get(f"{hook.server.url}/metrics")
    assert 'mailout_events_total{matched="no",provider="resend",type="bounced"} 1.0' in metrics


def test_soft_bounces_suppress_only_after_the_limit(hook: Hook) -> None:
    _row, pid, _mid = sent_row(hook.engine, "full@example.com")
    for n in range(1, 4):
        doc = w.resend_event("email.bounced", "full@example.com", pid,
                             bounce={"type": "Transient", "message": "452 4.2.2 full"})
        status, body = hook.post("resend", w.resend_request(doc))
        assert (status, body["suppressed"]) == (200, 1 if n == 3 else 0)
    assert suppressed(hook.engine) == {"full@example.com": "soft_bounces"}


def test_complaints_and_unsubscribes_suppress_deliveries_do_not(hook: Hook) -> None:
    _row, pid, _mid = sent_row(hook.engine, "c@example.com")
    for kind in ("email.delivered", "email.delivery_delayed"):
        hook.post("resend", w.resend_request(w.resend_event(kind, "c@example.com", pid)))
    assert suppressed(hook.engine) == {}
    hook.post("resend", w.resend_request(w.resend_event("email.complained", "c@example.com",
                                                        pid)))
    unsub = json.dumps({"RecordType": "SubscriptionChange", "MessageID": pid,
                        "Recipient": "u@example.com", "ChangedAt": "2025-01-20T10:00:00Z",
                        "SuppressSending": True, "SuppressionReason": "ManualSuppression"})
    assert hook.post("postmark", (unsub.encode(), w.basic(w.POSTMARK_AUTH)))[0] == 200
    assert suppressed(hook.engine) == {"c@example.com": "complaint",
                                       "u@example.com": "unsubscribe"}
    assert [e["type"] for e in stored(hook.engine)] == [
        "delivered", "deferred", "complained", "unsubscribed"]


def test_ignored_kinds_are_acknowledged_and_not_stored(hook: Hook) -> None:
    status, body = hook.post("resend", w.resend_request(
        w.resend_event("email.opened", "o@example.com", "pid")))
    assert (status, body["ignored"], body["stored"]) == (200, 1, 0)
    assert stored(hook.engine) == []


def test_bad_input_gets_a_clear_4xx_and_nothing_is_stored(hook: Hook,
                                                         sendgrid_keys: w.SendgridKeys) -> None:
    big = b'{"type": "email.bounced", "pad": "' + b"x" * (70 * 1024) + b'"}'
    status, body = w.post(f"{hook.server.url}/postmark", big, w.basic(w.POSTMARK_AUTH))
    assert (status, body["error"]) == (413, "too_large")
    status, body = hook.post("resend", _signed_raw(b"{not json"))
    assert (status, body["error"]) == (400, "invalid_json")
    status, body = hook.post("resend", w.resend_request(
        w.resend_event("email.teleported", "t@example.com", "pid")))
    assert (status, body["error"]) == (400, "unknown_event_type")
    bad = json.dumps([{"event": "exploded", "email": "e@example.com", "timestamp": 1,
                       "sg_event_id": "x"}]).encode()
    status, body = hook.post("sendgrid", (bad, sendgrid_keys.sign(bad)))
    assert (status, body["error"]) == (400, "unknown_event_type")
    status, body = hook.post("postmark", (b'{"RecordType": "Bounce"}', w.basic(w.POSTMARK_AUTH)))
    assert status == 400
    assert "Type" in body["reason"] or "Email" in body["reason"] or "BouncedAt" in body["reason"]
    status, body = w.post(f"{hook.server.url}/resend", b"{}", {})
    assert (status, body["error"]) == (401, "missing_auth")
    status, body = w.post(f"{hook.server.url}/nonesuch", b"{}", {})
    assert status == 404
    assert stored(hook.engine) == []


def _signed_raw(body: bytes) -> tuple[bytes, dict[str, str]]:
    from datetime import UTC, datetime

    from svix.webhooks import Webhook

    now = datetime.now(UTC)
    msg_id = f"msg_{uuid.uuid4().hex[:20]}"
    return body, {"svix-id": msg_id, "svix-timestamp": str(int(now.timestamp())),
                  "svix-signature": Webhook(w.RESEND_SECRET).sign(msg_id, now, body.decode())}


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


def _get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as resp:
        return str(resp.read().decode())


def test_return_path_links_only_for_the_rows_own_recipient(engine: Engine) -> None:
    from mailout import dsn
    from mailout.ingest import Policy, ReturnPath, ingest

    row_id, _pid, _mid = sent_row(engine, "nobody@gmail.example")
    raw = (Path(__file__).parent.parent / "fixtures" / "dsn" / "postfix_hard.eml").read_bytes()
    raw = raw.replace(b"bounces+41@", f"bounces+{row_id}@".encode())
    raw = raw.replace(b"<c0ffee00c0ffee00c0ffee00c0ffee41@shop.example>", b"<unknown@x>")
    policy = Policy(return_path=ReturnPath("bounces+{id}@shop.example"))
    with engine.begin() as conn:
        result = ingest(conn, dsn.parse(raw), policy)
    assert (result.stored, result.matched) == (1, 1)
    assert stored(engine)[0]["matched_by"] == "return_path"
    other = raw.replace(b"nobody@gmail.example", b"somebody@else.example")
    other = other.replace(b"Message-Id: <2025", b"Message-Id: <2026")
    with engine.begin() as conn:
        result = ingest(conn, dsn.parse(other), policy)
    assert (result.stored, result.matched, result.unmatched) == (1, 0, 1)


def test_concurrent_redeliveries_of_one_event_store_it_once(hook: Hook) -> None:
    from concurrent.futures import ThreadPoolExecutor
    from datetime import UTC, datetime, timedelta

    _row, pid, _mid = sent_row(hook.engine, "race@example.com")
    doc = w.resend_event("email.bounced", "race@example.com", pid,
                         bounce={"type": "Permanent", "message": "550 5.1.1"})
    now = datetime.now(UTC)
    # The same Svix message, signed at eight different moments: eight genuine retries.
    copies = [w.resend_request(doc, msg_id="msg_race", at=now + timedelta(seconds=i))
              for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda c: hook.post("resend", c), copies))
    assert [s for s, _ in replies] == [200] * 8
    assert sum(b["stored"] for _, b in replies) == 1
    assert sum(b["duplicates"] for _, b in replies) == 7
    assert len(stored(hook.engine)) == 1
    assert suppressed(hook.engine) == {"race@example.com": "hard_bounce"}
