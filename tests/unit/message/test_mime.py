"""The MIME builder, checked by parsing its output back with the stdlib parser."""

from __future__ import annotations

import email.header
import email.policy
import quopri
import re
from email.message import EmailMessage
from email.parser import BytesParser
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailout.message import mime

MESSAGE_ID = "<0123456789abcdef@shop.example.com>"
PARSER = BytesParser(policy=email.policy.default)

# Header text: any character but surrogates (not encodable), controls and line
# breaks, which the renderer refuses before it gets here.
HEADER_CHARS = st.characters(exclude_categories=("Cs", "Cc", "Zl", "Zp"))
# Body text: anything encodable. CR is left out here (a lone CR becomes a line
# break by design) and tested on its own.
BODY_CHARS = st.characters(exclude_categories=["Cs"], exclude_characters="\r")
NAME_CHARS = st.sampled_from("ABCXYZabcxyz0123456789-")
header_text = st.text(HEADER_CHARS, max_size=300).map(str.strip)
keys = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1,
               max_size=255).map(str.strip).filter(bool)
long_line = st.builds(lambda c, n: c * n, st.sampled_from("xé日🙂= .\t"),
                      st.integers(900, 5_000))
# Printable ASCII, tabs and "=": the builder's fast quoted-printable path.
ascii_text = st.lists(st.sampled_from([chr(c) for c in range(0x20, 0x7F)] + ["\t", "==="]),
                      max_size=300).map("".join)
body_text = st.lists(st.one_of(st.text(BODY_CHARS, max_size=200), ascii_text, long_line),
                     max_size=5).map("\n".join)
html_text = st.lists(
    st.one_of(
        st.text(BODY_CHARS, max_size=100).map(lambda t: f'<p class="x">{t}</p>'),
        long_line.map(lambda t: f"<td>{t}</td>"),
    ),
    max_size=5,
).map("".join)
# Lower-case names: two names differing only in case would be one header to a reader.
extras = st.dictionaries(
    st.text(NAME_CHARS, min_size=1, max_size=20).map(lambda n: f"X-{n.lower()}"),
    header_text,
    max_size=3,
)


def message(
    *,
    subject: str = "Hello",
    display: str = "",
    text: str | None = "Hi",
    html: str | None = None,
    key: str = "order-1",
    headers: dict[str, str] | None = None,
) -> bytes:
    lines = [
        mime.raw("Message-ID", MESSAGE_ID),
        mime.raw("Date", "Wed, 01 May 2024 12:00:00 +0000"),
        mime.address("From", [(display, "shop@example.com")]),
        mime.address("To", [("", "bob@example.com")]),
        mime.unstructured("Subject", subject),
        mime.raw("MIME-Version", "1.0"),
        mime.unstructured("Idempotency-Key", key),
    ]
    lines += [mime.unstructured(name, value) for name, value in (headers or {}).items()]
    return mime.build(lines, text, html)


def parse(data: bytes) -> EmailMessage:
    return PARSER.parsebytes(data)


def decoded(part: EmailMessage) -> str:
    """A part's text with "\n" line ends (MIME text is canonically CRLF)."""
    return cast(str, part.get_content()).replace("\r\n", "\n")


def expected(body: str) -> str:
    body = body.replace("\r\n", "\n").replace("\r", "\n")
    return body if body.endswith("\n") else body + "\n"


def check_wire_format(data: bytes) -> None:
    assert data.isascii()  # 7-bit: no 8BITMIME or SMTPUTF8 needed
    assert data.endswith(b"\r\n")
    lines = data.split(b"\r\n")[:-1]
    assert not any(b"\r" in line or b"\n" in line for line in lines)  # CRLF only
    assert max(len(line) for line in lines) <= 998
    body = data.partition(b"\r\n\r\n")[2]
    assert max(len(line) for line in body.split(b"\r\n")) <= 76
    # Relays may strip whitespace at a line end: quoted-printable must encode it.
    assert not any(line.endswith((b" ", b"\t")) for line in body.split(b"\r\n"))


def check_no_defects(parsed: EmailMessage) -> None:
    assert not parsed.defects
    for part in parsed.walk():
        assert not part.defects


def rfc2047_display_name(data: bytes) -> str:
    """The From display name decoded as RFC 2047 says: whitespace between adjacent
    encoded-words is dropped. Python's address parser adds a space there instead."""
    raw = data.split(b"\r\n\r\n", 1)[0].decode("ascii")
    from_value = re.search(r"^From: (.*?)\r\n(?! )", raw, re.S | re.M)
    assert from_value is not None
    phrase = from_value.group(1).replace("\r\n", "").rpartition(" <")[0]
    parts = email.header.decode_header(phrase)
    return "".join(p.decode(c or "ascii") if isinstance(p, bytes) else p for p, c in parts)


@settings(max_examples=200, deadline=None)
@given(subject=header_text, key=keys, headers=extras, text=body_text, html=html_text)
def test_multipart_round_trips(
    subject: str, key: str, headers: dict[str, str], text: str, html: str
) -> None:
    data = message(subject=subject, key=key, headers=headers, text=text, html=html)
    check_wire_format(data)
    parsed = parse(data)
    check_no_defects(parsed)
    assert parsed["Subject"] == subject
    assert parsed["Message-ID"] == MESSAGE_ID
    assert f"Message-ID: {MESSAGE_ID}\r\n".encode() in data  # verbatim
    assert parsed["Idempotency-Key"] == key
    assert parsed["To"] == "bob@example.com"
    for name, value in headers.items():
        assert parsed[name] == value
    assert parsed.get_content_type() == "multipart/alternative"
    parts = [cast(EmailMessage, p) for p in parsed.iter_parts()]
    assert [p.get_content_type() for p in parts] == ["text/plain", "text/html"]
    assert [p.get_content_charset() for p in parts] == ["utf-8", "utf-8"]
    assert decoded(parts[0]) == expected(text)
    assert decoded(parts[1]) == expected(html)


@settings(max_examples=200, deadline=None)
@given(display=st.text(HEADER_CHARS, max_size=120), body=body_text,
       as_html=st.booleans())
def test_display_name_and_single_part_round_trip(display: str, body: str, as_html: bool) -> None:
    data = message(display=display, text=None if as_html else body,
                   html=body if as_html else None)
    check_wire_format(data)
    parsed = parse(data)
    check_no_defects(parsed)
    (address,) = parsed["From"].addresses
    assert address.addr_spec == "shop@example.com"
    if display and len(mime.display_name(display, first_room=70)) > 1 and "=?" in data.decode():
        assert rfc2047_display_name(data) == display
    else:
        assert address.display_name == display
    assert parsed.get_content_type() == ("text/html" if as_html else "text/plain")
    assert decoded(parsed) == expected(body)


@settings(max_examples=100, deadline=None)
@given(mailboxes=st.lists(st.tuples(st.text(HEADER_CHARS, max_size=40),
                                    st.from_regex(r"[a-z]{1,10}@[a-z]{1,10}\.com", fullmatch=True)),
                          min_size=1, max_size=4))
def test_address_lists(mailboxes: list[tuple[str, str]]) -> None:
    data = mime.build([mime.address("Reply-To", mailboxes)], "x", None)
    check_wire_format(data)
    parsed = parse(data)
    assert [a.addr_spec for a in parsed["Reply-To"].addresses] == [a for _, a in mailboxes]


# -- examples --------------------------------------------------------------------


def test_plain_ascii_headers_stay_readable() -> None:
    data = message(subject="Your order 42 is confirmed", display="Shop")
    head = data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    assert b"Subject: Your order 42 is confirmed" in head
    assert b"From: Shop <shop@example.com>" in head
    assert b"To: bob@example.com" in head
    assert b"MIME-Version: 1.0" in head


def test_non_ascii_subject_is_an_encoded_word() -> None:
    data = message(subject="Grüße aus Köln")
    assert b"Subject: =?utf-8?b?R3LDvMOfZSBhdXMgS8O2bG4=?=\r\n" in data
    assert parse(data)["Subject"] == "Grüße aus Köln"


@pytest.mark.parametrize("subject", ["a =?utf-8?q?x?= b", " leading space"])
def test_text_a_reader_would_change_is_encoded(subject: str) -> None:
    data = message(subject=subject)
    assert b"Subject: =?utf-8?b?" in data
    assert parse(data)["Subject"] == subject


def test_long_subject_folds_at_whitespace() -> None:
    subject = " ".join(["word"] * 60)
    data = message(subject=subject)
    head = data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    assert max(len(line) for line in head) <= 78
    assert parse(data)["Subject"] == subject


def test_quoted_display_name() -> None:
    data = message(display='Smith, "J" \\ Co')
    assert b'From: "Smith, \\"J\\" \\\\ Co" <shop@example.com>' in data
    assert parse(data)["From"].addresses[0].display_name == 'Smith, "J" \\ Co'


def test_multipart_layout() -> None:
    data = message(text="plain", html="<p>html</p>")
    boundary = re.search(rb'boundary="(=_[0-9a-f]{24})"', data)
    assert boundary is not None
    b = boundary.group(1)
    body = data.split(b"\r\n\r\n", 1)[1]
    assert body.startswith(b"--" + b + b"\r\nContent-Type: text/plain;")
    assert body.endswith(b"\r\n--" + b + b"--\r\n")
    assert body.count(b"--" + b) == 3


def test_boundaries_differ() -> None:
    assert mime.new_boundary() != mime.new_boundary()


@pytest.mark.parametrize("text", ["trailing space \nand tab\t\nend  ", "café \n", " \n\t"])
def test_whitespace_at_a_line_end_is_encoded(text: str) -> None:
    data = mime.build(["Subject: x\r\n"], text, None)
    check_wire_format(data)
    assert decoded(parse(data)) == expected(text)


def test_lone_cr_and_lf_become_crlf() -> None:
    parsed = parse(message(text="a\rb\nc\r\nd"))
    assert decoded(parsed) == "a\nb\nc\nd\n"


@pytest.mark.parametrize(("text", "cte"), [
    ("plain ASCII = text\n", "quoted-printable"),
    ("Viele Grüße aus Köln, wir freuen uns auf Ihren Besuch. " * 20, "quoted-printable"),
    ("注文の確認 " * 50, "base64"),
])
def test_transfer_encoding_is_the_shorter(text: str, cte: str) -> None:
    data = message(text=text)
    assert f"Content-Transfer-Encoding: {cte}\r\n".encode() in data
    assert decoded(parse(data)) == expected(text)


@pytest.mark.parametrize("piece", ["x", "=", "a b", "a\tb", "é"])
def test_single_5000_character_line(piece: str) -> None:
    text = piece * (5_000 // len(piece))
    data = message(text=text, html=f"<p>{text}</p>")
    check_wire_format(data)
    parts = [cast(EmailMessage, p) for p in parse(data).iter_parts()]
    assert decoded(parts[0]) == text + "\n"
    assert decoded(parts[1]) == f"<p>{text}</p>\n"


def test_lone_surrogate_is_a_value_error() -> None:
    with pytest.raises(UnicodeEncodeError, match="surrogates"):
        message(text="\ud800")


def test_no_body_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="text or an html body"):
        mime.build([], None, None)


# -- through the renderer ----------------------------------------------------------


def test_renderer_keeps_addresses_of_non_ascii_reply_to() -> None:
    from datetime import UTC, datetime

    from mailout.message.render import Renderer
    from mailout.models import ClaimedMessage

    now = datetime(2024, 5, 1, tzinfo=UTC)
    msg = ClaimedMessage(
        id=1, key="k-1", queue="default", priority=0, recipient="bob@example.com",
        sender="Zoë Ü <zoe@example.com>", template=None, params=None, subject="Hi",
        text="x", html=None, headers={"Reply-To": "Jürgen <help@example.com>",
                                      "X-Tag": "ünï"},
        message_id=MESSAGE_ID, attempts=1, unknown_attempts=0, created_at=now,
        expires_at=None, lease_token="t", claimed_at=now, reclaimed=False,
    )
    envelope = Renderer(None, mail_from="shop@example.com").render(msg)
    assert b"Reply-To: =?utf-8?b?SsO8cmdlbg==?= <help@example.com>\r\n" in envelope.wire
    parsed = parse(envelope.wire)
    assert parsed["Reply-To"].addresses[0].display_name == "Jürgen"
    assert parsed["From"].addresses[0].display_name == "Zoë Ü"
    assert parsed["X-Tag"] == "ünï"
    assert envelope.mail_from == "zoe@example.com"


# -- the quoted-printable soft breaks, pinned ----------------------------------------


def _reference_soft_break(line: bytes) -> bytes:
    """The soft-break rule written plainly (the builder's first version): pieces of 75
    octets, a piece ending early rather than cutting an "=XX" escape in two."""
    pieces = []
    start = 0
    while len(line) - start > 76:
        cut = start + 75
        while b"=" in line[cut - 2 : cut]:
            cut -= 1
        pieces.append(line[start:cut])
        start = cut
    pieces.append(line[start:])
    return b"=\r\n".join(pieces)


qp_line = st.lists(st.sampled_from([b"a", b" ", b"\t", b"=3D", b"xyz"]), min_size=26,
                   max_size=400).map(b"".join).flatmap(
    lambda body: st.sampled_from([body, body + b"=20", body + b"=09"]))


@settings(max_examples=500, deadline=None)
@given(line=qp_line)
@pytest.mark.slow
def test_soft_breaks_are_the_reference_rules_byte_for_byte(line: bytes) -> None:
    # The fast paths (no escape; only the escaped whitespace at the end) must write the
    # same wire bytes as the plain rule.
    if len(line) > 76:
        assert mime._soft_break(line) == _reference_soft_break(line)


@pytest.mark.parametrize("tail", ["", " ", "\t", "=", " ="])
@pytest.mark.parametrize("length", [74, 75, 76, 77, 149, 150, 151, 152, 153, 2_000])
def test_long_lines_parse_strictly_and_decode_exactly(length: int, tail: str) -> None:
    text = ("Line of text. " * 200)[:length] + tail + "\nnext line\n"
    data = message(text=text, html=f"<p>{text}</p>")
    check_wire_format(data)
    strict = BytesParser(policy=email.policy.strict).parsebytes(data)
    check_no_defects(strict)
    parts = [cast(EmailMessage, p) for p in strict.iter_parts()]
    assert decoded(parts[0]) == text
    assert decoded(parts[1]) == f"<p>{text}</p>\n"
    body = data.split(b"\r\n\r\n", 2)[2].split(b"\r\n--", 1)[0]
    assert quopri.decodestring(body.replace(b"\r\n", b"\n")) == text.encode()


@pytest.mark.parametrize("lines", [1, 15, 16, 17, 60])
def test_trailing_whitespace_is_escaped_however_many_lines(lines: int) -> None:
    # Few lines are looked at one by one, many by searching the whole text.
    text = "".join(f"line {i}{' ' if i % 2 else chr(9)}\n" for i in range(lines))
    cte, body = mime.encode_body(text)
    assert cte == "quoted-printable"
    assert body == "".join(f"line {i}{'=20' if i % 2 else '=09'}\r\n"
                           for i in range(lines)).encode()


def test_template_sized_body_wire_bytes_are_pinned() -> None:
    # One exact body: the long line of the throughput benchmark's template, ending in a
    # space. Any change to the encoder that moves a byte shows here.
    cte, body = mime.encode_body("Hi,\n" + "Line of text. " * 12 + "\n")
    assert cte == "quoted-printable"
    assert body == (
        b"Hi,\r\n"
        b"Line of text. Line of text. Line of text. Line of text. Line of text. Line =\r\n"
        b"of text. Line of text. Line of text. Line of text. Line of text. Line of te=\r\n"
        b"xt. Line of text.=20\r\n")


@settings(max_examples=300, deadline=None)
@given(value=st.text(st.sampled_from("ab =?\t-é"), max_size=90))
def test_a_header_that_fits_one_line_is_what_folding_would_write(value: str) -> None:
    # The one-line shortcut must give the folding rules' bytes exactly.
    tokens = mime._plain_tokens("Subject", value)
    folded = mime.unstructured("Subject", value)
    if tokens is not None:
        assert folded == mime._fold_plain("Subject", tokens)
    assert folded.endswith("\r\n")
