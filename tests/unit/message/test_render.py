"""Rendering templates and building the MIME message."""

from __future__ import annotations

import dataclasses
import email.policy
from datetime import UTC, datetime
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mailout.exceptions import InvalidMessage, RenderError
from mailout.message import addresses, compose
from mailout.message.envelope import Envelope
from mailout.message.render import Renderer
from mailout.message.templates import template_exists, validate_template_name
from mailout.models import ClaimedMessage, Mailbox

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
MESSAGE_ID = "<20240501120000.abc123@mail.example.com>"


def claimed(**changes: Any) -> ClaimedMessage:
    base = ClaimedMessage(
        id=1,
        key="order-42-receipt",
        queue="default",
        priority=0,
        recipient="bob@example.com",
        sender=None,
        template=None,
        params=None,
        subject="Your receipt",
        text="Thanks for your order.",
        html=None,
        headers=None,
        message_id=MESSAGE_ID,
        attempts=1,
        unknown_attempts=0,
        created_at=NOW,
        expires_at=None,
        lease_token="lease",
        claimed_at=NOW,
        reclaimed=False,
    )
    return dataclasses.replace(base, **changes)


def templated(name: str, params: dict[str, Any] | None = None, **changes: Any) -> ClaimedMessage:
    return claimed(template=name, params=params, subject=None, text=None, **changes)


def parse(envelope: Envelope) -> EmailMessage:
    return BytesParser(policy=email.policy.default).parsebytes(envelope.wire)


def body(parsed: EmailMessage, subtype: str) -> str:
    """The decoded text of a part, with "\n" line ends.

    Quoted-printable and base64 text carries MIME's canonical CRLF line ends,
    which get_content() hands back as they are.
    """
    part = parsed.get_body((subtype,))
    assert part is not None
    return cast(str, cast(EmailMessage, part).get_content()).replace("\r\n", "\n")


def write_template(root: Path, name: str, files: dict[str, str]) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    for file, content in files.items():
        (folder / file).write_text(content, encoding="utf-8")


@pytest.fixture
def templates(tmp_path: Path) -> Path:
    write_template(
        tmp_path,
        "welcome",
        {
            "subject.txt": "  Welcome, {{ name }}!\n",
            "text.txt": "Hello {{ name }}, your code is {{ code }}.",
            "html.html": "<p>Hello {{ name }}, your code is <b>{{ code }}</b>.</p>",
        },
    )
    write_template(tmp_path, "plain", {"subject.txt": "Hi", "text.txt": "Just {{ what }}"})
    return tmp_path


@pytest.fixture
def renderer(templates: Path) -> Renderer:
    return Renderer(templates, mail_from="Shop <shop@example.com>", clock=lambda: NOW)


def test_template_renders_params(renderer: Renderer) -> None:
    envelope = renderer.render(templated("welcome", {"name": "Ada", "code": "X1"}))
    parsed = parse(envelope)
    assert parsed["Subject"] == "Welcome, Ada!"  # rendered, then stripped
    assert body(parsed, "plain").rstrip("\n") == "Hello Ada, your code is X1."
    assert "<b>X1</b>" in body(parsed, "html")


def test_html_is_autoescaped_but_text_and_subject_are_not(renderer: Renderer) -> None:
    name = "<Ada & Bob>"
    parsed = parse(renderer.render(templated("welcome", {"name": name, "code": "1"})))
    assert parsed["Subject"] == f"Welcome, {name}!"
    assert f"Hello {name}," in body(parsed, "plain")
    assert "Hello &lt;Ada &amp; Bob&gt;," in body(parsed, "html")


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (templated("welcome", {"name": "Ada"}), "code"),  # StrictUndefined
        (templated("welcome", None), "name"),
        (templated("missing", {}), "not found"),
        (templated("../etc", {}), "bad template name"),
        (claimed(subject=None), "neither"),
        (claimed(text=None), "neither"),
        (claimed(template="welcome"), "both a template and pre-rendered"),
        (claimed(subject="Hello\r\nBcc: evil@example.com"), "line break"),
        (claimed(subject="Hello\nthere"), "line break"),
        (claimed(subject="Hello\u2028there"), "line break"),
        (claimed(headers={"Message-ID": "<other@example.com>"}), "override"),
        (claimed(headers={"message-id": "<other@example.com>"}), "override"),
        (claimed(headers={"From": "x@example.com"}), "override"),
        (claimed(headers={"Content-Type": "text/html"}), "override"),
        (claimed(headers={"Idempotency-Key": "other"}), "override"),
        (claimed(headers={"X-Evil": "a\r\nBcc: x@example.com"}), "malformed"),
        (claimed(headers={"Bad Name": "x"}), "malformed"),
        (claimed(recipient="not an address"), "To"),
        (claimed(recipient="a@example.com, b@example.com"), "To"),
        (claimed(recipient="jösé@example.com"), "ASCII"),
        (claimed(sender="x\r\n@example.com"), "From"),
        (claimed(message_id="<a\r\nb@example.com>"), "Message-ID"),
    ],
)
def test_render_errors(renderer: Renderer, message: ClaimedMessage, reason: str) -> None:
    with pytest.raises(RenderError, match=reason):
        renderer.render(message)


def test_crlf_in_a_rendered_subject_is_an_error(tmp_path: Path) -> None:
    write_template(tmp_path, "sneaky", {"subject.txt": "Hi {{ x }} there", "text.txt": "."})
    renderer = Renderer(tmp_path, mail_from="shop@example.com")
    with pytest.raises(RenderError, match="line break"):
        renderer.render(templated("sneaky", {"x": "a\r\nBcc: evil@example.com"}))


@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ({"subject.txt": "{% if %}", "text.txt": "x"}, "subject.txt line 1"),
        ({"subject.txt": "x", "text.txt": "{{ 1 / 0 }}"}, "ZeroDivisionError"),
        ({"subject.txt": "x"}, "text.txt"),
        ({"subject.txt": "x", "text.txt": "{% include 'nope.txt' %}"}, "nope.txt"),
    ],
)
def test_broken_templates(tmp_path: Path, files: dict[str, str], reason: str) -> None:
    write_template(tmp_path, "broken", files)
    with pytest.raises(RenderError, match=reason):
        Renderer(tmp_path, mail_from="shop@example.com").render(templated("broken", {}))


def test_no_templates_dir_configured() -> None:
    with pytest.raises(RenderError, match="no templates directory"):
        Renderer(None, mail_from="shop@example.com").render(templated("welcome", {}))


def test_headers_are_present_and_exact(renderer: Renderer) -> None:
    message = claimed(headers={"X-Campaign": "spring", "Reply-To": "help@example.com"})
    envelope = renderer.render(message)
    lines = envelope.wire.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    assert f"Message-ID: {MESSAGE_ID}".encode() in lines
    assert b"Idempotency-Key: order-42-receipt" in lines
    assert b"Date: Wed, 01 May 2024 12:00:00 +0000" in lines
    parsed = parse(envelope)
    assert parsed["Message-ID"] == MESSAGE_ID
    assert parsed["Idempotency-Key"] == "order-42-receipt"
    assert parsed["From"] == "Shop <shop@example.com>"
    assert parsed["To"] == "bob@example.com"
    assert parsed["MIME-Version"] == "1.0"
    assert parsed["X-Campaign"] == "spring"
    assert parsed["Reply-To"] == "help@example.com"
    # The structured parts carry the same message, for transports that take fields.
    assert (envelope.mail_from, envelope.recipients, envelope.message_id) == (
        "shop@example.com", ("bob@example.com",), MESSAGE_ID)
    assert envelope.sender == Mailbox("shop@example.com", "Shop")
    assert envelope.to == (Mailbox("bob@example.com"),)
    assert envelope.idempotency_key == "order-42-receipt"
    assert envelope.subject == parsed["Subject"]
    assert dict(envelope.headers) == {"X-Campaign": "spring", "Reply-To": "help@example.com"}
    assert envelope.wire is envelope.wire  # built once


def test_sender_overrides_default_and_custom_idempotency_header(templates: Path) -> None:
    renderer = Renderer(templates, mail_from="shop@example.com", idempotency_header="X-Key")
    envelope = renderer.render(claimed(sender="Zoë Ü <zoe@example.com>"))
    parsed = parse(envelope)
    assert envelope.mail_from == "zoe@example.com"
    assert parsed["From"].addresses[0].display_name == "Zoë Ü"
    assert parsed["X-Key"] == "order-42-receipt"
    assert "Idempotency-Key" not in parsed


@pytest.mark.parametrize("header", ["Subject", "Content-Type", "Bad Name", "Message-ID"])
def test_bad_idempotency_header_name(header: str) -> None:
    with pytest.raises(ValueError, match="idempotency header"):
        Renderer(None, mail_from="shop@example.com", idempotency_header=header)


@pytest.mark.parametrize("mail_from", ["", "nobody", "a@example.com, b@example.com"])
def test_bad_default_sender(mail_from: str) -> None:
    with pytest.raises(ValueError, match="From"):
        Renderer(None, mail_from=mail_from)


@pytest.mark.parametrize(
    "subject", ["Grüße aus Köln", "注文の確認", "Re: ✅ done " * 12, "a =?utf-8?q?x?= b"]
)
def test_subject_is_encoded_and_round_trips(renderer: Renderer, subject: str) -> None:
    envelope = renderer.render(claimed(subject=subject))
    header_block = envelope.wire.split(b"\r\n\r\n", 1)[0]
    assert header_block.isascii()
    if not subject.isascii() or "=?" in subject:
        assert b"Subject: =?utf-8?b?" in header_block  # RFC 2047
    assert parse(envelope)["Subject"] == subject.strip()


def test_long_ascii_subject_is_folded_and_round_trips(renderer: Renderer) -> None:
    subject = "word " * 60 + "end"
    envelope = renderer.render(claimed(subject=subject))
    assert b"Subject: word word" in envelope.wire
    assert max(len(line) for line in envelope.wire.split(b"\r\n")) <= 78
    assert parse(envelope)["Subject"] == subject


def test_text_only_is_text_plain_utf8(renderer: Renderer) -> None:
    parsed = parse(renderer.render(claimed(text="Grüße")))
    assert parsed.get_content_type() == "text/plain"
    assert parsed.get_content_charset() == "utf-8"
    assert body(parsed, "plain") == "Grüße\n"


def test_text_and_html_is_multipart_alternative_text_first(renderer: Renderer) -> None:
    parsed = parse(renderer.render(claimed(html="<p>Thanks</p>")))
    assert parsed.get_content_type() == "multipart/alternative"
    parts = [cast(EmailMessage, part) for part in parsed.iter_parts()]
    assert [part.get_content_type() for part in parts] == ["text/plain", "text/html"]
    assert all(part.get_content_charset() == "utf-8" for part in parts)


def test_html_only(renderer: Renderer) -> None:
    parsed = parse(renderer.render(claimed(text=None, html="<p>Thanks</p>")))
    assert parsed.get_content_type() == "text/html"
    assert body(parsed, "html") == "<p>Thanks</p>\n"


@pytest.mark.parametrize("char", ["x", "é", "日"])
def test_long_single_line_body_keeps_lines_short(renderer: Renderer, char: str) -> None:
    text = char * 5_000
    envelope = renderer.render(claimed(text=text, html=f"<p>{text}</p>"))
    assert max(len(line) for line in envelope.wire.split(b"\r\n")) <= 998
    assert envelope.wire.isascii()  # 7-bit clean: no 8BITMIME needed
    assert b"\n" not in envelope.wire.replace(b"\r\n", b"")  # CRLF only
    parsed = parse(envelope)
    assert body(parsed, "plain") == text + "\n"
    assert body(parsed, "html") == f"<p>{text}</p>\n"


def test_template_exists_and_names(templates: Path) -> None:
    assert template_exists(templates, "welcome")
    assert template_exists(templates, "plain")
    assert not template_exists(templates, "missing")
    assert not template_exists(templates, "../welcome")
    (templates / "half").mkdir()
    (templates / "half" / "subject.txt").write_text("x")
    assert not template_exists(templates, "half")


@pytest.mark.parametrize("name", ["welcome", "order_receipt", "v2.reset-password", "A1"])
def test_good_template_names(name: str) -> None:
    validate_template_name(name)


@pytest.mark.parametrize(
    "name", ["", ".hidden", "..", "a/b", "a\\b", "a..b", "/abs", "sp ace", "é", "a" * 101, "a\x00"]
)
def test_bad_template_names(name: str) -> None:
    with pytest.raises(ValueError, match="template name"):
        validate_template_name(name)


def test_environment_is_built_once(renderer: Renderer) -> None:
    first = renderer._env
    renderer.render(templated("plain", {"what": "a"}))
    renderer.render(templated("plain", {"what": "b"}))
    assert renderer._env is first
    assert first is not None
    assert len(first.cache or {}) == 2  # subject + text compiled once, no html file


# Unicode without surrogates (not encodable), controls and line breaks (the subject
# refuses them; a lone CR in the body becomes a line break by design).
SAFE_CHARS = st.characters(exclude_categories=("Cs", "Cc", "Zl", "Zp"))


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    subject=st.text(SAFE_CHARS, max_size=200),
    text=st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\r"), max_size=400),
)
def test_unicode_round_trips(renderer: Renderer, subject: str, text: str) -> None:
    envelope = renderer.render(claimed(subject=subject, text=text))
    assert envelope.wire.isascii()
    # What the envelope vouches for (the SMTP transport then skips normalizing):
    assert envelope.wire_crlf_only
    wire = envelope.wire
    assert wire.endswith(b"\r\n")
    assert wire.count(b"\r\n") == wire.count(b"\n") == wire.count(b"\r")
    assert max(len(line) for line in envelope.wire.split(b"\r\n")) <= 998
    parsed = parse(envelope)
    assert parsed["Subject"] == subject.strip()
    expected = text if text.endswith("\n") else text + "\n"
    assert body(parsed, "plain") == expected


def test_return_path_puts_the_row_id_in_the_envelope_sender() -> None:
    from mailout.exceptions import ConfigError
    from mailout.message.return_path import ReturnPath

    secret = "return-path-secret-0123"
    renderer = Renderer(None, mail_from="Shop <shop@example.com>",
                        return_path="bounces+{id}@shop.example", return_path_secret=secret)
    msg = claimed(id=4242)
    envelope = renderer.render(msg)
    assert envelope.return_path is not None
    assert envelope.return_path.startswith("bounces+4242-")  # signed: bounces+4242-<tag>@
    assert ReturnPath("bounces+{id}@shop.example", secret).row_id(envelope.return_path) == 4242
    assert envelope.mail_from == envelope.return_path
    assert b"bounces+4242" not in envelope.wire  # an envelope matter, not a header
    assert Renderer(None, mail_from="shop@example.com").render(msg).mail_from == \
        "shop@example.com"
    with pytest.raises(ConfigError):
        Renderer(None, mail_from="shop@example.com", return_path="bounces@shop.example",
                 return_path_secret=secret)
    with pytest.raises(ConfigError):  # no secret: a return path anyone could forge
        Renderer(None, mail_from="shop@example.com", return_path="bounces+{id}@shop.example")


# -- enqueue and render read addresses with one parser (mailout.message.addresses) -------------

POISON_SENDERS = ['"." <x@shop.example>', '"..." <x@shop.example>', '"a\\"b" <x@shop.example>']


@pytest.mark.parametrize("sender", POISON_SENDERS)
def test_a_display_name_enqueue_accepts_renders(renderer: Renderer, sender: str) -> None:
    stored = addresses.mailbox("sender", sender)  # what enqueue writes
    envelope = renderer.render(claimed(sender=stored))
    assert envelope.sender.address == "x@shop.example"
    assert envelope.sender.name == addresses.parse_mailbox("sender", sender)[0]
    assert b"From: " in envelope.wire


def test_a_reply_to_the_parser_fails_on_is_refused_at_enqueue() -> None:
    with pytest.raises(InvalidMessage, match="Reply-To"):
        compose.headers({"Reply-To": " :;:ü"}, reply_to=False, unsubscribe=None)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.text(alphabet=st.sampled_from(' "<>@.,:;()\\ü=?ab'), max_size=24))
def test_any_reply_to_enqueue_accepts_renders(renderer: Renderer, value: str) -> None:
    try:
        headers = compose.headers({"Reply-To": value}, reply_to=False, unsubscribe=None)
    except InvalidMessage:
        return  # refused at enqueue: never reaches the worker
    try:
        renderer.render(claimed(headers=headers)).wire  # noqa: B018 - building it is the test
    except RenderError as exc:
        raise AssertionError(f"enqueue accepted {value!r}, the renderer refused it: {exc}") \
            from exc


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(alphabet=st.sampled_from(' ".,:;()\\<>@üa'), max_size=12))
def test_any_sender_enqueue_accepts_renders(renderer: Renderer, name: str) -> None:
    try:
        stored = addresses.mailbox("sender", f"{name} <x@shop.example>")
    except InvalidMessage:
        return
    try:
        renderer.render(claimed(sender=stored)).wire  # noqa: B018 - building it is the test
    except RenderError as exc:
        raise AssertionError(f"enqueue accepted {name!r}, the renderer refused it: {exc}") \
            from exc


def test_a_failure_building_the_wire_form_is_a_render_error(
    renderer: Renderer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rendering checks everything first, so the MIME builder should never fail; if it
    # does, the attempt must see a RenderError (permanent), not a transport crash.
    from mailout.message import mime

    envelope = renderer.render(claimed())

    def broken(*_args: object) -> bytes:
        raise UnicodeEncodeError("ascii", "é", 0, 1, "a builder bug")

    monkeypatch.setattr(mime, "build", broken)
    with pytest.raises(RenderError, match="UnicodeEncodeError"):
        _ = envelope.wire
