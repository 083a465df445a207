"""The webhook handler over real HTTP (uvicorn), storing into SQLite and PostgreSQL:
what it does with events whatever the provider. An event that matches no row is kept
and counted; soft bounces suppress only after the limit; complaints and unsubscribes
suppress, deliveries do not; bad input gets a clear 4xx and stores nothing;
concurrent copies of one event store it once. Each provider's own receiver is
checked in its test file (``test_<provider>.py``).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from bench.support import webhooks as w
from sqlalchemy import Engine

from mailout.db import delivery_events
from tests.integration.webhooks.receiving import Hook, sent_row, stored, suppressed
from tests.integration.webhooks.test_resend import RESEND


def test_an_event_that_matches_no_row_is_kept_and_counted(hook: Hook) -> None:
    status, body = hook.post("resend", RESEND.bounce("who@example.com", "pid-x", "<x@y>"))
    assert (status, body["stored"], body["matched"], body["unmatched"]) == (200, 1, 0, 1)
    [event] = stored(hook.engine)
    assert event["outbox_id"] is None
    with hook.engine.connect() as conn:
        assert ("resend", "bounced", False, 1) in delivery_events.event_counts(conn)
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


def _get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as resp:
        return str(resp.read().decode())


def test_return_path_links_only_for_the_rows_own_recipient(engine: Engine) -> None:
    from mailout.feedback import dsn
    from mailout.feedback.ingest import Policy, ReturnPath, ingest

    row_id, _pid, _mid = sent_row(engine, "nobody@gmail.example")
    return_path = ReturnPath("bounces+{id}@shop.example", "return-path-secret-0123")
    raw = (Path(__file__).resolve().parents[2] / "fixtures" / "dsn" / "postfix_hard.eml"
           ).read_bytes()
    raw = raw.replace(b"bounces+41@", return_path.for_row(row_id).split("@")[0].encode() + b"@")
    raw = raw.replace(b"<c0ffee00c0ffee00c0ffee00c0ffee41@shop.example>", b"<unknown@x>")
    policy = Policy(return_path=return_path)
    with engine.begin() as conn:
        result = ingest(conn, dsn.parse(raw), policy)
    assert (result.stored, result.matched) == (1, 1)
    assert stored(engine)[0]["matched_by"] == "return_path"
    other = raw.replace(b"nobody@gmail.example", b"somebody@else.example")
    other = other.replace(b"Message-Id: <2025", b"Message-Id: <2026")
    with engine.begin() as conn:
        result = ingest(conn, dsn.parse(other), policy)
    assert (result.stored, result.matched, result.unmatched, result.unverified) == (1, 0, 1, 1)
    assert result.suppressed == ()


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


def test_a_json_integer_past_pythons_digit_limit_is_a_400_for_every_provider(
        hook: Hook) -> None:
    # Before: ValueError from int(), a 500 and a logged traceback, before authentication
    # for Mailgun and SES (their signatures are inside the JSON).
    body = b'{"n": ' + b"9" * 5000 + b"}"
    for provider in sorted(hook.handler.receivers):
        status, answer = hook.post(provider, (body, {"x-amz-sns-message-type": "Notification"}))
        # 401 where the credentials travel in a header and are checked first.
        assert status in (400, 401), (provider, status, answer)
        assert answer["error"] in ("invalid_json", "missing_auth", "bad_signature"), provider


def _outside_address() -> str | None:
    """This machine's address on its default route (no packet is sent), if it has one."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: routing only
            address: str = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def test_the_receivers_counters_are_not_served_to_the_internet(engine: Engine) -> None:
    import pytest

    from mailout.webhooks.app import standalone_app
    from mailout.webhooks.settings import WebhookSettings

    outside = _outside_address()
    if outside is None:
        pytest.skip("this machine has no address besides loopback to reach the server on")
    for token in (None, "metrics-token-for-tests-83hd"):
        app = standalone_app(engine, WebhookSettings(metrics_token=token))
        with w.serving(app, host="0.0.0.0") as server:
            port = server.url.rsplit(":", 1)[1]
            from_outside = w.get(f"http://{outside}:{port}/metrics")
            assert from_outside[0] == 404
            local = w.get(f"http://127.0.0.1:{port}/metrics")
            assert local[0] == (200 if token is None else 404)
            if token is not None:
                bearer = {"Authorization": f"Bearer {token}"}
                assert w.get(f"http://{outside}:{port}/metrics", bearer)[0] == 200
