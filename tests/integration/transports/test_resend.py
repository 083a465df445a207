"""Resend over its HTTP API (/emails), against a local fake.

Each test sends a hand-built envelope (every field a message can hold) or drives the
fake to one documented answer, and checks the exact request the provider received
and the decision the transport reached.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import replace

import pytest
from bench.support.providers.resend import FakeResend
from bench.support.providers.resend import error as resend_error
from bench.support.providers.server import Reply

from mailout.transports.base import Decision
from tests.support.envelopes import PDF, PNG, full_envelope
from tests.support.transport_harness import build, provider_url


@pytest.fixture
def resend() -> Iterator[FakeResend]:
    with FakeResend() as fake:
        yield fake
        assert fake.violations == []


async def test_resend_maps_every_field_and_sends_the_key_as_a_header(
    resend: FakeResend,
) -> None:
    transport = build(provider_url("resend", resend.secret, resend.url))
    result = await transport.send(full_envelope())
    await transport.close()
    assert (result.decision, result.provider_id) == (Decision.SENT, "resend-000001")
    [request] = resend.requests
    assert request.headers["authorization"] == f"Bearer {resend.secret}"
    assert request.headers["idempotency-key"] == "order-9-invoice"
    assert request.json() == {
        "from": "Shop <shop@example.com>",
        "to": ["Alice <alice@example.com>", "bob@example.com"],
        "cc": ["Carol <carol@example.com>"],
        "bcc": ["audit@example.com"],
        "reply_to": ["Help desk <help@example.com>"],
        "subject": "Your invoice",
        "text": "Invoice attached.\n",
        "html": '<p>Invoice attached.</p><img src="cid:logo@shop">',
        "headers": {"Message-ID": "<order-9-invoice@shop.example.com>", "X-Order": "9",
                    "List-Unsubscribe": "<mailto:unsub@example.com>"},
        "attachments": [
            {"filename": "invoice.pdf", "content": base64.b64encode(PDF).decode(),
             "content_type": "application/pdf"},
            {"filename": "logo.png", "content": base64.b64encode(PNG).decode(),
             "content_type": "image/png", "content_id": "logo@shop"},
        ],
    }


async def test_resend_drops_a_repeated_key_and_refuses_it_with_another_body(
    resend: FakeResend,
) -> None:
    transport = build(provider_url("resend", resend.secret, resend.url))
    first = await transport.send(full_envelope())
    again = await transport.send(full_envelope())
    changed = await transport.send(full_envelope(to="someone-else@example.com"))
    await transport.close()
    assert again.decision is Decision.SENT
    assert again.provider_id == first.provider_id  # the first answer, nothing sent again
    assert len(resend.delivered) == 1
    assert resend.dedupe_hits == 1
    assert changed.decision is Decision.FAILED  # never a resend: the first may be delivered
    assert changed.reason == "idempotency_conflict"
    assert changed.code == 409


@pytest.mark.parametrize(("reply", "decision", "reason", "wait"), [
    (resend_error(429, "rate_limit_exceeded", "Too many", **{"Retry-After": "7"}),
     Decision.RETRY, "rate_limited", 7.0),
    (resend_error(429, "daily_quota_exceeded", "Quota"), Decision.RETRY, "rate_limited", None),
    (resend_error(500, "internal_server_error", "oops", **{"Retry-After": "2"}),
     Decision.RETRY, "server_error", 2.0),
    (resend_error(422, "invalid_from_address", "Invalid `from` field"), Decision.FAILED,
     "rejected", None),
    (resend_error(400, "validation_error", "bad"), Decision.FAILED, "rejected", None),
    (resend_error(401, "missing_api_key", "Missing API key"), Decision.PAUSE, "unauthorized",
     None),
    (resend_error(403, "validation_error", "The example.com domain is not verified"),
     Decision.PAUSE, "unauthorized", None),
    (resend_error(409, "concurrent_idempotent_requests", "in progress"), Decision.RETRY,
     "key_in_flight", None),
])
async def test_resend_classifies_each_documented_error(
    resend: FakeResend, reply: Reply, decision: Decision, reason: str, wait: float | None,
) -> None:
    resend.answer_always(reply)
    transport = build(provider_url("resend", resend.secret, resend.url))
    result = await transport.send(full_envelope())
    await transport.close()
    assert (result.decision, result.reason, result.retry_after) == (decision, reason, wait)
    assert result.code == reply.status
    assert result.text is not None
    assert reply.body["name"] in result.text


async def test_a_slow_answer_after_the_request_is_unknown(resend: FakeResend) -> None:
    resend.delay = 1.0
    transport = build(provider_url("resend", resend.secret, resend.url, timeout="0.3"))
    result = await transport.send(full_envelope())
    await transport.close()
    assert result.decision is Decision.UNKNOWN
    assert result.reason == "timeout_after_request"


async def test_resend_check_accepts_full_and_sending_only_keys_and_hides_them() -> None:
    with FakeResend(restricted=True) as fake:
        good = build(provider_url("resend", fake.secret, fake.url))
        bad = build(provider_url("resend", "re_wrong_key_123", fake.url))
        ok, refused = await good.check(), await bad.check()
        await good.close()
        await bad.close()
    assert ok.ok
    assert "sending-only" in ok.line
    assert not refused.ok
    assert "refused" in refused.line
    for line in (ok.line, refused.line):
        assert fake.secret not in line
        assert "re_wrong_key_123" not in line
    assert [(r.method, r.path) for r in fake.requests] == [("GET", "/domains")] * 2


async def test_a_retry_to_the_pending_recipients_names_only_them(resend: FakeResend) -> None:
    """deliver_to (a message some recipients already accepted): a JSON API has no
    envelope apart from its address fields, so only the pending ones are named."""
    envelope = replace(full_envelope(), deliver_to=("bob@example.com", "audit@example.com"))
    transport = build(provider_url("resend", resend.secret, resend.url))
    result = await transport.send(envelope)
    await transport.close()
    assert result.decision is Decision.SENT
    body = resend.requests[0].json()
    assert (body["to"], body["bcc"]) == (["bob@example.com"], ["audit@example.com"])
    assert "cc" not in body
