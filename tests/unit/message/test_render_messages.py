"""Rendering complete messages: every generated message parses under
``email.policy.strict``, and its recipients, headers and attachments come back."""

from __future__ import annotations

import dataclasses
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import strict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mailout.exceptions import RenderError
from mailout.message.render import Renderer
from mailout.models import Attachment, Mailbox
from tests.unit.message.test_render import NOW, claimed

RENDERER = Renderer(None, mail_from="Shop <shop@example.com>", clock=lambda: NOW)

# Display names a person might have: letters of several scripts, spaces inside,
# RFC 5322 specials that force quoting. At most 16 characters, so a non-ASCII name
# is one encoded-word (Python's parser adds a space between adjacent ones).
NAME_CHARS = st.sampled_from(list("AZaz09 ,.\"'()<>@;:\\éüñßøÆ日本語Ωж-_!"))
names = st.text(NAME_CHARS, max_size=16).map(lambda s: " ".join(s.split()))
locals_ = st.text(st.sampled_from(list("abcxyz019.-_+")), min_size=1, max_size=12).filter(
    lambda s: not s.startswith(".") and not s.endswith(".") and ".." not in s)
addresses = st.builds(lambda local, domain: f"{local}@{domain}.example", locals_,
                      st.sampled_from(["mail", "shop", "a-b"]))
mailboxes = st.builds(Mailbox, addresses, names)
FILE_CHARS = st.characters(exclude_categories=("Cs", "Cc", "Zl", "Zp"),
                           exclude_characters="/\\\x85")
filenames = st.text(FILE_CHARS, min_size=1, max_size=80).filter(lambda s: s.strip() == s != "")
files = st.builds(lambda name, data, inline, i: Attachment(
    name, data, inline=inline, cid=f"part{i}@mail.example" if inline else None),
    filenames, st.binary(max_size=3000), st.booleans(), st.integers(0, 10**6))
header_values = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=100
                        ).map(str.strip)


def parsed(wire: bytes) -> EmailMessage:
    message = BytesParser(policy=strict).parsebytes(wire)
    assert isinstance(message, EmailMessage)
    return message


def pairs(header: object) -> list[tuple[str, str]]:
    return [(a.display_name, a.addr_spec) for a in header.addresses]  # type: ignore[attr-defined]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(to=st.lists(mailboxes, min_size=1, max_size=4), cc=st.lists(mailboxes, max_size=3),
       bcc=st.lists(mailboxes, max_size=3), reply_to=st.lists(mailboxes, max_size=2),
       attachments=st.lists(files, max_size=4), html=st.booleans(),
       extras=st.dictionaries(st.sampled_from(["X-Campaign", "X-Ref", "List-Id"]),
                              header_values, max_size=3))
def test_any_message_parses_strictly_and_round_trips(
    to: list[Mailbox], cc: list[Mailbox], bcc: list[Mailbox], reply_to: list[Mailbox],
    attachments: list[Attachment], html: bool, extras: dict[str, str],
) -> None:
    cids = [a.cid for a in attachments if a.cid]
    if len(set(cids)) != len(cids):
        return  # enqueue refuses a cid used twice
    msg = claimed(recipient=to[0].address, to=tuple(to), cc=tuple(cc), bcc=tuple(bcc),
                  reply_to=tuple(reply_to), attachments=tuple(attachments),
                  html="<p>hi</p>" if html else None, headers=extras or None)
    envelope = RENDERER.render(msg)
    mail = parsed(envelope.wire)
    # What the SMTP transport relies on: CRLF line ends only (headers, boundaries and
    # attachments included).
    assert envelope.wire_crlf_only
    assert not any(b"\r" in line or b"\n" in line for line in envelope.wire.split(b"\r\n"))

    assert pairs(mail["To"]) == [(m.name, m.address) for m in to]
    assert pairs(mail["Cc"]) == [(m.name, m.address) for m in cc] if cc else "Cc" not in mail
    if reply_to:
        assert pairs(mail["Reply-To"]) == [(m.name, m.address) for m in reply_to]
    assert "Bcc" not in mail
    for m in bcc:  # in the envelope, never on the wire's headers
        assert m.address in envelope.recipients
    for name, value in extras.items():
        assert mail[name] == value
    parts = [p for p in mail.walk() if p.get_content_disposition() in ("attachment", "inline")]
    # The raw bytes: get_content() would decode a part typed text/* (a file named
    # "x.C" is guessed text/x-csrc) into a str.
    assert [(p.get_filename(), p.get_payload(decode=True)) for p in parts] == [
        (a.filename, a.content) for a in _in_wire_order(attachments, html)]
    for part, attachment in zip(parts, _in_wire_order(attachments, html), strict=True):
        assert part.get_content_type() == attachment.content_type
        assert part["Content-ID"] == (f"<{attachment.cid}>" if attachment.cid else None)


def _in_wire_order(attachments: list[Attachment], html: bool) -> list[Attachment]:
    """Inline parts sit with the HTML, before the attached ones, when there is HTML."""
    if not html:
        return attachments
    return [a for a in attachments if a.inline] + [a for a in attachments if not a.inline]


def test_the_plain_message_has_no_multipart_layer() -> None:
    wire = RENDERER.render(claimed()).wire
    assert b"multipart" not in wire
    assert parsed(wire).get_content_type() == "text/plain"


def test_inline_images_sit_in_a_related_part_with_the_html() -> None:
    logo = Attachment("logo.png", b"\x89PNG", inline=True)
    msg = claimed(html='<img src="cid:logo.png">', attachments=(logo,))
    mail = parsed(RENDERER.render(msg).wire)
    assert mail.get_content_type() == "multipart/related"
    assert mail.get_param("type") == "multipart/alternative"
    [_, image] = list(mail.iter_parts())
    assert (image["Content-ID"], image.get_content()) == ("<logo.png>", b"\x89PNG")


@pytest.mark.parametrize("bad", [
    dataclasses.replace(Attachment("a.pdf", b"x"), filename="a\r\nBcc: x@evil.example"),
    dataclasses.replace(Attachment("a.pdf", b"x"), content_type="text/html\r\nX: y"),
    dataclasses.replace(Attachment("a.pdf", b"x", inline=True), cid="a>\r\n<b"),
])
def test_a_stored_attachment_that_would_inject_a_header_is_a_render_error(
    bad: Attachment,
) -> None:
    with pytest.raises(RenderError):
        RENDERER.render(claimed(attachments=(bad,)))


def test_a_stored_cc_that_would_inject_a_header_is_a_render_error() -> None:
    with pytest.raises(RenderError):
        RENDERER.render(claimed(cc=(Mailbox("x@example.com", "Eve\r\nBcc: a@b.example"),)))
