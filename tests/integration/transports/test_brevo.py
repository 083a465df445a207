"""Brevo over its API (/v3/smtp/email), against a local fake.

Each sends a hand-built envelope holding every field and checks the exact request the
provider received; then each documented failure is answered and classified.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from email.header import decode_header, make_header

import pytest
from bench.support.providers.brevo import FakeBrevo
from bench.support.providers.server import Reply

from mailout.message.envelope import Envelope
from mailout.models import Mailbox
from mailout.transports.base import Decision, SendResult
from mailout.transports.brevo import key_uuid
from tests.integration.transports.http_api import b64, send_full
from tests.support.envelopes import PDF, full_envelope
from tests.support.transport_harness import build, provider_url


def _without_inline() -> Envelope:
    """The full envelope less its inline image, which Brevo's API cannot carry."""
    return replace(full_envelope(), attachments=full_envelope().attachments[:1])


@pytest.fixture
def fake() -> Iterator[FakeBrevo]:
    with FakeBrevo() as running:
        yield running
        assert running.violations == []


async def test_brevo_maps_the_fields_and_sends_a_uuid_key(fake: FakeBrevo) -> None:
    envelope = _without_inline()
    transport = build(provider_url("brevo", fake.secret, fake.url))
    result = await transport.send(envelope)
    again = await transport.send(envelope)
    await transport.close()
    assert result.decision is Decision.SENT
    assert again.provider_id == result.provider_id  # deduplicated by the key
    assert (len(fake.delivered), fake.dedupe_hits) == (1, 1)
    [request, _] = fake.requests
    assert request.headers["api-key"] == fake.secret
    assert request.json() == {
        "sender": {"email": "shop@example.com", "name": "Shop"},
        "to": [{"email": "alice@example.com", "name": "Alice"}, {"email": "bob@example.com"}],
        "cc": [{"email": "carol@example.com", "name": "Carol"}],
        "bcc": [{"email": "audit@example.com"}],
        "replyTo": {"email": "help@example.com", "name": "Help desk"},
        "subject": "Your invoice",
        "htmlContent": '<p>Invoice attached.</p><img src="cid:logo@shop">',
        "textContent": "Invoice attached.\n",
        "headers": {"X-Order": "9", "List-Unsubscribe": "<mailto:unsub@example.com>",
                    "idempotencyKey": key_uuid("order-9-invoice")},
        "attachment": [{"name": "invoice.pdf", "content": b64(PDF)}],
    }


async def test_brevo_fails_what_its_api_cannot_carry_without_sending(fake: FakeBrevo) -> None:
    result = await send_full(fake)  # holds an inline image
    assert (result.decision, result.reason) == (Decision.FAILED, "inline_unsupported")
    assert fake.requests == []


@pytest.mark.parametrize(("reply", "decision", "reason"), [
    (Reply(400, {"code": "invalid_parameter", "message": "bad"}), Decision.FAILED,
     "rejected"),
    (Reply(401, {"code": "unauthorized", "message": "Key not found"}),
     Decision.PAUSE, "unauthorized"),
    (Reply(402, {"code": "not_enough_credits", "message": "no credits"}),
     Decision.PAUSE, "not_enough_credits"),
    (Reply(403, {"code": "permission_denied", "message": "no"}), Decision.PAUSE,
     "unauthorized"),
    (Reply(429, {"code": "too_many_requests", "message": "slow"}), Decision.RETRY,
     "rate_limited"),
])
async def test_each_documented_error_is_classified(
    fake: FakeBrevo, reply: Reply, decision: Decision, reason: str,
) -> None:
    fake.answer_always(reply)
    transport = build(provider_url("brevo", fake.secret, fake.url))
    result = await transport.send(_without_inline())
    await transport.close()
    assert (result.decision, result.reason, result.code) == (decision, reason, reply.status)


async def test_names_with_commas_or_non_ascii_and_non_ascii_headers_go_encoded(
    fake: FakeBrevo,
) -> None:
    # Brevo writes these into the message as given: "Müller, Anna" became two broken
    # addresses, and "ü" was mangled. Encoded words decode to the same text.
    envelope = replace(_without_inline(), to=(Mailbox("anna@example.com", "Müller, Anna"),),
                       sender=Mailbox("shop@example.com", "Shop, Inc."),
                       headers=(("X-Campaign", "Frühling"),))
    transport = build(provider_url("brevo", fake.secret, fake.url))
    try:
        assert (await transport.send(envelope)).decision is Decision.SENT
    finally:
        await transport.close()
    body = fake.requests[-1].json()
    names = [body["sender"]["name"], body["to"][0]["name"], body["headers"]["X-Campaign"]]
    assert all(n.isascii() and "," not in n for n in names)
    decoded = [str(make_header(decode_header(n))) for n in names]
    assert decoded == ["Shop, Inc.", "Müller, Anna", "Frühling"]


async def test_a_429_waits_for_brevos_own_reset_header(fake: FakeBrevo) -> None:
    # Brevo documents x-sib-ratelimit-reset (seconds until the limit resets) and sends
    # no Retry-After.
    fake.answer_always(Reply(429, {"code": "too_many_requests", "message": "slow down"},
                             {"x-sib-ratelimit-reset": "17"}))
    result = await _send(fake)
    assert (result.decision, result.reason, result.retry_after) == (Decision.RETRY,
                                                                     "rate_limited", 17.0)


async def _send(fake: FakeBrevo) -> SendResult:
    transport = build(provider_url("brevo", fake.secret, fake.url))
    try:
        return await transport.send(_without_inline())
    finally:
        await transport.close()
