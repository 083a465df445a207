"""Messages stored whole: what mailout still checks in bytes it does not write itself
(issue 31, item 3), and how the renderer sends them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from mailout.exceptions import InvalidMessage, RenderError
from mailout.message import whole
from mailout.message.render import Renderer
from mailout.models import ClaimedMessage, Mailbox

MIME = (b"Message-ID: <1@example.com>\r\nFrom: a@example.com\r\nTo: b@example.com\r\n"
        b"Subject: \r\nMIME-Version: 1.0\r\n\r\nContent")


def test_a_well_formed_message_gives_its_message_id() -> None:
    assert whole.message_id(MIME, max_bytes=10_000) == "<1@example.com>"


@pytest.mark.parametrize(("mime", "reason"), [
    (MIME.replace(b"Subject: ", b"Subject: x\nBcc: victim@example.com"), "line break"),
    (MIME.replace(b"Subject: ", b"Subject: x\rBcc: v@example.com"), "line break"),
    (MIME.replace(b"Subject: ", b"Subject: \x00"), "control character"),
    (MIME.replace(b"Subject: ", b"Subject: " + b"x" * 1000), "998"),
    (MIME.replace(b"Subject: ", b"Received: from x\r\nSubject: "), "trace"),
    (MIME.replace(b"Subject: ", b"DKIM-Signature: v=1\r\nSubject: "), "signature"),
    (MIME.replace(b"Message-ID: <1@example.com>\r\n", b""), "0 Message-ID"),
    (MIME.replace(b"Subject: ", b"Message-ID: <2@example.com>\r\nSubject: "), "2 Message-ID"),
    (MIME.replace(b"<1@example.com>", b"<1 2@example.com>"), "printable"),
    (MIME.replace(b"\r\n\r\n", b"\r\n"), "header block"),
    (b" folded\r\n" + MIME, "continuation"),
    (MIME.replace(b"Subject: ", b"No colon here\r\nSubject: "), "malformed"),
])
def test_a_malformed_or_forged_header_block_is_refused(mime: bytes, reason: str) -> None:
    with pytest.raises(InvalidMessage, match=reason) as raised:
        whole.message_id(mime, max_bytes=10_000)
    assert raised.value.field == "mime"


def test_a_message_over_the_size_limit_is_refused() -> None:
    with pytest.raises(InvalidMessage, match="limit is 10"):
        whole.message_id(MIME, max_bytes=10)


@pytest.mark.parametrize("address", ["a b@example.com", "a@example.com>\r\nRCPT TO:<x",
                                     "<a@example.com>", "", "a\tb"])
def test_an_envelope_address_is_one_token(address: str) -> None:
    with pytest.raises(InvalidMessage):
        whole.envelope_address("to", address)


@pytest.mark.parametrize("address", ["django", "webmaster@localhost", "from@xn--4ca9at.com",
                                     "=?utf-8?q?J=C3=B6rg?=@example.com"])
def test_what_djangos_smtp_backend_sends_is_an_envelope_address(address: str) -> None:
    assert whole.envelope_address("to", address) == address


def _claimed(**kw: object) -> ClaimedMessage:
    now = datetime.now(UTC)
    base: dict[str, object] = {
        "id": 1, "key": "k-1", "queue": "default", "priority": 0,
        "recipient": "b@example.com", "sender": "a@example.com", "template": None,
        "params": None, "subject": "", "text": None, "html": None, "headers": None,
        "message_id": "<1@example.com>", "attempts": 1, "unknown_attempts": 0,
        "created_at": now, "expires_at": None, "lease_token": "t", "claimed_at": now,
        "reclaimed": False, "mime": MIME}
    base.update(kw)
    return ClaimedMessage(**base)  # type: ignore[arg-type]


def test_a_whole_message_goes_out_as_it_is_without_an_unasked_key_header() -> None:
    envelope = Renderer(None, mail_from="w@example.com").render(_claimed())
    assert envelope.wire == MIME
    assert (envelope.mail_from, envelope.recipients) == ("a@example.com", ("b@example.com",))
    assert (envelope.subject, envelope.text) == ("", "Content")  # for HTTP transports


def test_a_key_header_is_added_when_asked_for() -> None:
    renderer = Renderer(None, mail_from="w@example.com", whole_key_header="Idempotency-Key")
    assert renderer.render(_claimed()).wire == b"Idempotency-Key: k-1\r\n" + MIME


def test_a_stored_envelope_address_that_could_smuggle_a_command_is_a_render_error() -> None:
    msg = _claimed(to=(Mailbox("b@example.com>\r\nRCPT TO:<x@example.com"),))
    with pytest.raises(RenderError):
        Renderer(None, mail_from="w@example.com").render(msg)
