"""SendGrid over its API (/v3/mail/send), against a local fake.

Each sends a hand-built envelope holding every field and checks the exact request the
provider received; then each documented failure is answered and classified.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from bench.support.providers.sendgrid import FakeSendGrid
from bench.support.providers.server import Reply

from mailout.transports.base import Decision
from tests.integration.transports.http_api import b64, send_full
from tests.support.envelopes import PDF, PNG


@pytest.fixture
def fake() -> Iterator[FakeSendGrid]:
    with FakeSendGrid() as running:
        yield running
        assert running.violations == []


async def test_sendgrid_maps_the_fields_and_stores_x_message_id(fake: FakeSendGrid) -> None:
    result = await send_full(fake)
    assert (result.decision, result.provider_id) == (Decision.SENT, "sendgrid-000001")
    [request] = fake.requests
    assert request.headers["authorization"] == f"Bearer {fake.secret}"
    assert request.json() == {
        "personalizations": [{
            "to": [{"email": "alice@example.com", "name": "Alice"}, {"email": "bob@example.com"}],
            "cc": [{"email": "carol@example.com", "name": "Carol"}],
            "bcc": [{"email": "audit@example.com"}]}],
        "from": {"email": "shop@example.com", "name": "Shop"},
        "reply_to": {"email": "help@example.com", "name": "Help desk"},
        "subject": "Your invoice",
        "content": [{"type": "text/plain", "value": "Invoice attached.\n"},
                    {"type": "text/html",
                     "value": '<p>Invoice attached.</p><img src="cid:logo@shop">'}],
        "custom_args": {"mailout_key": "order-9-invoice"},
        "headers": {"X-Order": "9", "List-Unsubscribe": "<mailto:unsub@example.com>"},
        "attachments": [
            {"content": b64(PDF), "type": "application/pdf", "filename": "invoice.pdf",
             "disposition": "attachment"},
            {"content": b64(PNG), "type": "image/png", "filename": "logo.png",
             "disposition": "inline", "content_id": "logo@shop"}],
    }


@pytest.mark.parametrize(("reply", "decision", "reason"), [
    (Reply(400, {"errors": [{"message": "bad"}]}), Decision.FAILED, "rejected"),
    (Reply(413, {"errors": [{"message": "too big"}]}), Decision.FAILED,
     "too_large"),
    (Reply(403, {"errors": [{"message": "no"}]}), Decision.PAUSE,
     "unauthorized"),
    (Reply(503, b""), Decision.RETRY, "server_error"),
])
async def test_each_documented_error_is_classified(
    fake: FakeSendGrid, reply: Reply, decision: Decision, reason: str,
) -> None:
    fake.answer_always(reply)
    result = await send_full(fake, key="k-no-inline")
    assert (result.decision, result.reason, result.code) == (decision, reason, reply.status)
