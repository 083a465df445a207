"""Mailgun over its API (/v3/DOMAIN/messages), against a local fake.

Each sends a hand-built envelope holding every field and checks the exact request the
provider received; then each documented failure is answered and classified.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from bench.support.providers.mailgun import FakeMailgun
from bench.support.providers.server import Reply

from mailout.transports.base import Decision
from tests.integration.transports.http_api import b64, send_full
from tests.support.envelopes import PDF, PNG


@pytest.fixture
def fake() -> Iterator[FakeMailgun]:
    with FakeMailgun() as running:
        yield running
        assert running.violations == []


async def test_mailgun_sends_a_multipart_form_with_inline_files_by_cid(
    fake: FakeMailgun,
) -> None:
    result = await send_full(fake)
    assert result.decision is Decision.SENT
    [delivery] = fake.delivered
    assert delivery.fields["fields"] == [
        ("from", "Shop <shop@example.com>"), ("to", "Alice <alice@example.com>"),
        ("to", "bob@example.com"), ("cc", "Carol <carol@example.com>"),
        ("bcc", "audit@example.com"), ("subject", "Your invoice"),
        ("text", "Invoice attached.\n"),
        ("html", '<p>Invoice attached.</p><img src="cid:logo@shop">'),
        ("h:Reply-To", "Help desk <help@example.com>"),
        ("h:Message-Id", "<order-9-invoice@shop.example.com>"), ("h:X-Order", "9"),
        ("h:List-Unsubscribe", "<mailto:unsub@example.com>"),
        ("v:mailout-key", "order-9-invoice")]
    assert fake.files == [[("attachment", "invoice.pdf", PDF, "application/pdf"),
                           ("inline", "logo@shop", PNG, "image/png")]]


@pytest.mark.parametrize(("reply", "decision", "reason"), [
    (Reply(400, {"message": "bad"}), Decision.FAILED, "rejected"),
    (Reply(401, b"Forbidden"), Decision.PAUSE, "unauthorized"),
    (Reply(402, {"message": "pay"}), Decision.PAUSE, "payment_required"),
    (Reply(404, {"message": "Domain not found"}), Decision.PAUSE,
     "domain_not_found"),
    (Reply(429, {"message": "slow"}), Decision.RETRY, "rate_limited"),
    (Reply(500, {"message": "oops"}), Decision.RETRY, "server_error"),
])
async def test_each_documented_error_is_classified(
    fake: FakeMailgun, reply: Reply, decision: Decision, reason: str,
) -> None:
    fake.answer_always(reply)
    result = await send_full(fake, key="k-no-inline")
    assert (result.decision, result.reason, result.code) == (decision, reason, reply.status)


async def test_an_error_echoing_the_basic_credentials_is_kept_without_them(
    fake: FakeMailgun,
) -> None:
    # A proxy or debugging server that quotes the request's Authorization header back:
    # base64("api:KEY") is the key, as readable as the key itself.
    basic = b64(f"api:{fake.secret}".encode())
    fake.answer_always(Reply(400, {"message": f"bad request (Authorization: Basic {basic})"}))
    result = await send_full(fake)
    assert result.text is not None
    assert "bad request" in result.text
    assert basic not in result.text
    assert basic.rstrip("=") not in result.text
    assert fake.secret not in result.text
