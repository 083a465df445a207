"""Postmark over its HTTP API (/email), against a local fake.

Each test sends a hand-built envelope (every field a message can hold) or drives the
fake to one documented answer, and checks the exact request the provider received
and the decision the transport reached.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from bench.support.providers.postmark import FakePostmark
from bench.support.providers.server import Reply

from mailout.transports.base import Decision
from tests.support.envelopes import PDF, PNG, full_envelope
from tests.support.transport_harness import build, provider_url


@pytest.fixture
def postmark() -> Iterator[FakePostmark]:
    with FakePostmark() as fake:
        yield fake
        assert fake.violations == []


async def test_postmark_maps_every_field(postmark: FakePostmark) -> None:
    transport = build(provider_url("postmark", postmark.secret, postmark.url))
    result = await transport.send(full_envelope())
    await transport.close()
    assert (result.decision, result.provider_id) == (Decision.SENT, "postmark-000001")
    [request] = postmark.requests
    assert request.headers["x-postmark-server-token"] == postmark.secret
    assert "idempotency-key" not in request.headers
    assert request.json() == {
        "From": "Shop <shop@example.com>",
        "To": "Alice <alice@example.com>, bob@example.com",
        "Cc": "Carol <carol@example.com>",
        "Bcc": "audit@example.com",
        "ReplyTo": "Help desk <help@example.com>",
        "Subject": "Your invoice",
        "MessageStream": "outbound",
        "TextBody": "Invoice attached.\n",
        "HtmlBody": '<p>Invoice attached.</p><img src="cid:logo@shop">',
        "Headers": [{"Name": "Message-ID", "Value": "<order-9-invoice@shop.example.com>"},
                    {"Name": "X-Order", "Value": "9"},
                    {"Name": "List-Unsubscribe", "Value": "<mailto:unsub@example.com>"}],
        "Attachments": [
            {"Name": "invoice.pdf", "Content": base64.b64encode(PDF).decode(),
             "ContentType": "application/pdf"},
            {"Name": "logo.png", "Content": base64.b64encode(PNG).decode(),
             "ContentType": "image/png", "ContentID": "cid:logo@shop"},
        ],
    }


async def test_postmark_inactive_recipient_fails_with_the_address_named(
    postmark: FakePostmark,
) -> None:
    postmark.refuse("alice@example.com")
    transport = build(provider_url("postmark", postmark.secret, postmark.url))
    result = await transport.send(full_envelope())
    await transport.close()
    assert (result.decision, result.reason, result.code) == (
        Decision.FAILED, "inactive_recipient", 422)
    assert [(r.address, r.decision, r.code) for r in result.recipients] == [
        ("alice@example.com", Decision.FAILED, 406)]


@pytest.mark.parametrize(("status", "code", "decision", "reason"), [
    (422, 300, Decision.FAILED, "invalid_request"),
    (422, 411, Decision.FAILED, "forbidden_attachment"),
    (422, 400, Decision.PAUSE, "sender_not_found"),
    (422, 401, Decision.PAUSE, "sender_not_confirmed"),
    (422, 405, Decision.PAUSE, "not_allowed"),
    (422, 412, Decision.PAUSE, "account_pending"),
    (422, 413, Decision.PAUSE, "account_may_not_send"),
    (401, 10, Decision.PAUSE, "unauthorized"),
    (503, 100, Decision.RETRY, "maintenance"),
    (500, 0, Decision.RETRY, "server_error"),
    (429, 429, Decision.RETRY, "rate_limited"),
])
async def test_postmark_classifies_each_documented_error_code(
    postmark: FakePostmark, status: int, code: int, decision: Decision, reason: str,
) -> None:
    postmark.answer_always(Reply(status, {"ErrorCode": code, "Message": "said so"}))
    transport = build(provider_url("postmark", postmark.secret, postmark.url))
    result = await transport.send(full_envelope())
    await transport.close()
    assert (result.decision, result.reason, result.code) == (decision, reason, status)


async def test_postmark_check_reads_the_server_and_hides_the_token(
    postmark: FakePostmark,
) -> None:
    good = build(provider_url("postmark", postmark.secret, postmark.url))
    bad = build(provider_url("postmark", "not-the-token", postmark.url))
    ok, refused = await good.check(), await bad.check()
    await good.close()
    await bad.close()
    assert ok.ok
    assert not refused.ok
    assert postmark.secret not in ok.line + refused.line
    assert "not-the-token" not in refused.line
    assert [(r.method, r.path) for r in postmark.requests] == [("GET", "/server")] * 2
