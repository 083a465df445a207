"""The transport contract: every transport passes the same suite (as River's drivers do).

Each test drives a real transport, through its harness, to one situation and checks
the provider-neutral result the worker will act on. A new transport joins by adding
a harness to ``tests/support/transport_harness.py`` and its name to ``TRANSPORTS``.
"""

from __future__ import annotations

import email.policy
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from email.parser import BytesParser

import pytest
from bench.support.smtpserver import SmtpTestServer

from mailout.message.envelope import Envelope
from mailout.message.render import Renderer
from mailout.models import ClaimedMessage
from mailout.transports.base import Decision, SendResult
from tests.support.transport_harness import FAKES, Harness, harness

# Every HTTP API provider with a fake (transport_harness.FAKES) joins by being there.
TRANSPORTS = ["memory", "smtp", *FAKES, "failover"]
NOW = datetime(2026, 1, 1, tzinfo=UTC)
RENDERER = Renderer(None, mail_from="Shop <shop@example.com>")


def rendered(to: str, key: str = "order-1-confirmation") -> Envelope:
    """An envelope rendered by mailout itself, as the worker builds them."""
    return RENDERER.render(ClaimedMessage(
        id=1, key=key, queue="default", priority=0, recipient=to, sender=None,
        template=None, params=None, subject="Your order", text="Thanks for your order.\n",
        html="<p>Thanks for your order.</p>", headers={"X-Order": "1"},
        message_id=f"<{key}@shop.example.com>", attempts=1, unknown_attempts=0,
        created_at=NOW, expires_at=None, lease_token="-", claimed_at=NOW, reclaimed=False,
    ))


@pytest.fixture(params=TRANSPORTS)
async def provider(request: pytest.FixtureRequest,
                   auth_smtp_server: SmtpTestServer) -> AsyncIterator[Harness]:
    with harness(request.param, auth_smtp_server) as h:
        yield h
        await h.transport.close()


async def test_an_accepted_message_is_sent_with_the_providers_id(provider: Harness) -> None:
    envelope = rendered("alice@example.com")
    result = await provider.transport.send(envelope)
    assert result.decision is Decision.SENT
    assert result.reason
    assert result.provider_id  # what links a bounce back to the row
    [got] = provider.delivered()
    if provider.carries_message_id:
        assert got.message_id == envelope.message_id  # never replaced, so traces line up
    assert got.recipients == ("alice@example.com",)


async def test_the_message_id_the_headers_and_the_key_reach_the_provider(
    provider: Harness,
) -> None:
    envelope = rendered("alice@example.com", key="order-7-receipt")
    assert (await provider.transport.send(envelope)).decision is Decision.SENT
    [got] = provider.delivered()
    if provider.carries_message_id:
        assert got.message_id == "<order-7-receipt@shop.example.com>"
    if got.wire is not None:  # SMTP and memory: the RFC 5322 message itself
        parsed = BytesParser(policy=email.policy.strict).parsebytes(got.wire)
        assert parsed["Message-ID"] == "<order-7-receipt@shop.example.com>"
        assert parsed["Idempotency-Key"] == "order-7-receipt"
        assert parsed["X-Order"] == "1"
    else:  # an HTTP API: custom headers as fields, the key in the provider's own field
        assert got.headers.get("X-Order") == "1"
        assert got.key == provider.native_key("order-7-receipt")


async def test_a_permanent_refusal_fails_with_the_reason_kept(provider: Harness) -> None:
    provider.refuse("gone@example.com")
    result = await provider.transport.send(rendered("gone@example.com"))
    assert result.decision is Decision.FAILED
    assert result.reason
    assert provider.delivered() == []


async def test_a_transient_refusal_is_retried(provider: Harness) -> None:
    provider.defer("busy@example.com")
    result = await provider.transport.send(rendered("busy@example.com"))
    assert result.decision is Decision.RETRY
    assert provider.delivered() == []


async def test_a_lost_reply_after_the_content_is_unknown(provider: Harness) -> None:
    provider.lose_reply("maybe@example.com")
    result = await provider.transport.send(rendered("maybe@example.com"))
    assert result.decision is Decision.UNKNOWN  # the provider may have it: never "failed"


async def test_wrong_credentials_pause_sending(provider: Harness) -> None:
    broken = provider.misconfigured()
    try:
        result = await broken.send(rendered("alice@example.com"))
    finally:
        await broken.close()
    assert result.decision is Decision.PAUSE
    assert provider.delivered() == []


async def test_an_unreachable_provider_is_a_result_not_an_exception(
    provider: Harness,
) -> None:
    down = provider.unreachable()
    try:
        result = await down.send(rendered("alice@example.com"))
    finally:
        await down.close()
    assert result.decision in (Decision.RETRY, Decision.OUTAGE)
    assert isinstance(result, SendResult)


async def test_one_refusal_does_not_spoil_the_next_message(provider: Harness) -> None:
    provider.refuse("gone@example.com")
    first = await provider.transport.send(rendered("gone@example.com", key="k1"))
    second = await provider.transport.send(rendered("alice@example.com", key="k2"))
    assert (first.decision, second.decision) == (Decision.FAILED, Decision.SENT)
    assert [d.recipients for d in provider.delivered()] == [("alice@example.com",)]


async def test_check_passes_on_a_working_transport_and_close_is_idempotent(
    provider: Harness,
) -> None:
    checked = await provider.transport.check()
    assert checked.ok, checked.line
    assert provider.transport.name == provider.name
    await provider.transport.close()
    await provider.transport.close()
