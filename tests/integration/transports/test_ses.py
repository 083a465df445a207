"""Amazon SES over its v2 API (SendEmail, raw content), against moto's server.

Each sends a hand-built envelope holding every field and checks the exact request the
provider received; then each documented failure is answered and classified.
"""

from __future__ import annotations

import base64
import dataclasses
import email
import email.policy
from collections.abc import Iterator

import pytest
from bench.support.providers.server import Reply
from bench.support.providers.ses import FakeSes

from mailout.models import Mailbox
from mailout.transports.base import Decision
from tests.integration.transports.http_api import send_full
from tests.support.envelopes import PDF, full_envelope
from tests.support.transport_harness import build, provider_url


@pytest.fixture
def fake() -> Iterator[FakeSes]:
    with FakeSes() as running:
        yield running
        assert running.violations == []


async def test_ses_sends_the_raw_message_with_bcc_only_in_the_destination(
    fake: FakeSes,
) -> None:
    result = await send_full(fake)
    assert result.decision is Decision.SENT
    [request] = [r for r in fake.requests if r.path == "/v2/email/outbound-emails"]
    body = request.json()
    # Bare addresses in the JSON fields (SES wants 7-bit ASCII); the names are in the
    # raw message.
    assert body["FromEmailAddress"] == "shop@example.com"
    assert body["Destination"] == {
        "ToAddresses": ["alice@example.com", "bob@example.com"],
        "CcAddresses": ["carol@example.com"], "BccAddresses": ["audit@example.com"]}
    assert body["ReplyToAddresses"] == ["help@example.com"]
    raw = email.message_from_bytes(base64.b64decode(body["Content"]["Raw"]["Data"]),
                                   policy=email.policy.default)
    assert raw["Message-ID"] == "<order-9-invoice@shop.example.com>"
    assert raw["Bcc"] is None
    assert raw["X-Order"] == "9"
    parts = {p.get_filename(): p.get_content() for p in raw.iter_attachments()}
    assert parts["invoice.pdf"] == PDF
    assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKID")


@pytest.mark.parametrize(("kind", "status", "decision", "reason"), [
    ("MessageRejected", 400, Decision.FAILED, "message_rejected"),
    ("BadRequestException", 400, Decision.FAILED, "rejected"),
    ("MailFromDomainNotVerifiedException", 400, Decision.PAUSE, "mail_from_not_verified"),
    ("AccountSuspendedException", 400, Decision.PAUSE, "account_suspended"),
    ("SendingPausedException", 400, Decision.PAUSE, "sending_paused"),
    ("NotFoundException", 404, Decision.PAUSE, "not_found"),
    ("TooManyRequestsException", 429, Decision.RETRY, "throttled"),
    ("LimitExceededException", 400, Decision.RETRY, "limit_exceeded"),
    ("InternalFailure", 500, Decision.RETRY, "server_error"),
])
async def test_ses_classifies_each_documented_error_type(
    kind: str, status: int, decision: Decision, reason: str,
) -> None:
    with FakeSes() as fake:
        fake.answer_always(Reply(status, {"message": "said so"}, {"x-amzn-ErrorType": kind}))
        result = await send_full(fake)
    assert (result.decision, result.reason, result.code) == (decision, reason, status)


async def test_ses_with_a_wrong_secret_pauses_and_check_says_so_without_the_secret() -> None:
    with FakeSes() as fake:
        bad = build(provider_url("ses", "not-the-secret/at+all", fake.url))
        result = await bad.send(full_envelope())
        checked = await bad.check()
        await bad.close()
    assert (result.decision, result.code) == (Decision.PAUSE, 403)
    assert "SignatureDoesNotMatch" in (result.text or "")
    assert not checked.ok
    assert "not-the-secret" not in checked.line + (result.text or "")


async def test_non_ascii_names_stay_in_the_raw_message_and_the_json_fields_are_ascii(
    fake: FakeSes,
) -> None:
    envelope = dataclasses.replace(
        full_envelope(), sender=Mailbox("shop@example.com", "Boutique Zoë"),
        to=(Mailbox("anna@bücher.example", "Anna Müller"),),
        reply_to=(Mailbox("help@example.com", "Équipe d'aide"),))
    transport = build(provider_url("ses", fake.secret, fake.url))
    try:
        result = await transport.send(envelope)
    finally:
        await transport.close()
    assert result.decision is Decision.SENT
    [request] = [r for r in fake.requests if r.path == "/v2/email/outbound-emails"]
    body = request.json()
    fields = [body["FromEmailAddress"], *body["Destination"]["ToAddresses"],
              *body["ReplyToAddresses"]]
    assert fields == ["shop@example.com", "anna@xn--bcher-kva.example", "help@example.com"]
    assert all(field.isascii() for field in fields)
    raw = email.message_from_bytes(base64.b64decode(body["Content"]["Raw"]["Data"]),
                                   policy=email.policy.default)
    assert raw["From"].addresses[0].display_name == "Boutique Zoë"


@pytest.mark.parametrize(("failed", "decision", "reason"), [
    ("shop@example.com", Decision.PAUSE, "sender_not_verified"),  # our own From
    ("example.com", Decision.PAUSE, "sender_not_verified"),  # our From's domain
    ("alice@example.com", Decision.FAILED, "message_rejected"),  # a sandbox recipient
])
async def test_an_unverified_sender_pauses_and_an_unverified_recipient_fails_one_message(
    failed: str, decision: Decision, reason: str,
) -> None:
    # SES's wording (sandbox and unverified identities share MessageRejected).
    said = ("Email address is not verified. The following identities failed the check "
            f"in region US-EAST-1: {failed}")
    with FakeSes() as fake:
        fake.answer_always(Reply(400, {"message": said}, {"x-amzn-ErrorType": "MessageRejected"}))
        result = await send_full(fake)
    assert (result.decision, result.reason) == (decision, reason)
