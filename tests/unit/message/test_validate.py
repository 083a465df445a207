"""The enqueue rules for recipients, unsubscribe links, locales and template variants."""

from __future__ import annotations

from pathlib import Path

import pytest

from mailout.exceptions import InvalidMessage
from mailout.message import addresses, validate
from mailout.message.templates import resolve_variant, variants
from mailout.models import Attachment, Mailbox


@pytest.mark.parametrize(("given", "expected"), [
    ("bob@Example.COM", [("", "bob@example.com")]),
    ('"Doe, John" <john@example.com>', [("Doe, John", "john@example.com")]),
    ("Ana Pérez <ana@example.com>", [("Ana Pérez", "ana@example.com")]),
    (Mailbox("q@example.com", 'Quote " and \\ backslash'),
     [('Quote " and \\ backslash', "q@example.com")]),
    (["a@example.com", '"B, Inc." <b@example.com>'],
     [("", "a@example.com"), ("B, Inc.", "b@example.com")]),
])
def test_mailboxes_keep_display_names_exactly(given: object,
                                              expected: list[tuple[str, str]]) -> None:
    assert addresses.mailboxes("to", given) == expected


@pytest.mark.parametrize("given", [
    "a@example.com, b@example.com", [], "not an address", ["ok@example.com", "bad@"],
    "Eve <e@example.com>\r\nBcc: x@example.com", Mailbox("e@example.com", "Eve\x1b[31m"), 42,
])
def test_bad_mailboxes_are_refused(given: object) -> None:
    with pytest.raises(InvalidMessage) as caught:
        addresses.mailboxes("cc", given)
    assert caught.value.field == "cc"


def test_unsubscribe_headers() -> None:
    assert validate.unsubscribe("https://shop.example/u/1") == {
        "List-Unsubscribe": "<https://shop.example/u/1>",
        "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"}
    assert validate.unsubscribe("mailto:u@shop.example?subject=stop") == {
        "List-Unsubscribe": "<mailto:u@shop.example?subject=stop>"}


@pytest.mark.parametrize("given", [
    "http://shop.example/u", "https://shop.example/a b", "https://x/>\r\nBcc: y", "https:",
    ["https://a.example/1", "https://b.example/2"], [], "javascript:alert(1)",
])
def test_bad_unsubscribe_links_are_refused(given: object) -> None:
    with pytest.raises(InvalidMessage) as caught:
        validate.unsubscribe(given)
    assert caught.value.field == "unsubscribe"


def test_headers_that_have_their_own_argument_say_so() -> None:
    for name, argument in (("Cc", "cc"), ("BCC", "bcc"), ("To", "to")):
        with pytest.raises(InvalidMessage, match=f"use the {argument} argument"):
            validate.headers({name: "x@example.com"})
    assert validate.headers({"Reply-To": "x@example.com"}) == {"Reply-To": "x@example.com"}


@pytest.mark.parametrize(("given", "expected"), [
    ("es-MX", "es-MX"), ("pt_BR", "pt-BR"), ("zh-Hant-TW", "zh-Hant-TW"), ("de", "de")])
def test_locales(given: str, expected: str) -> None:
    assert validate.locale(given) == expected


@pytest.mark.parametrize("given", ["", "e", "es/MX", "../x", "es-", "x" * 40, 7])
def test_bad_locales(given: object) -> None:
    with pytest.raises(InvalidMessage):
        validate.locale(given)


def test_variants_go_from_specific_to_the_template_itself(tmp_path: Path) -> None:
    assert variants("zh-Hant-TW") == ["zh-Hant-TW", "zh-Hant", "zh", ""]
    assert variants(None) == [""]
    (tmp_path / "t" / "es").mkdir(parents=True)
    for folder in (tmp_path / "t", tmp_path / "t" / "es"):
        (folder / "subject.txt").write_text("s")
        (folder / "text.txt").write_text("t")
    assert resolve_variant(tmp_path, "t", "es-MX") == "t/es"
    assert resolve_variant(tmp_path, "t", "fr") == "t"
    assert resolve_variant(tmp_path, "missing", "es") is None


def test_an_attachment_needs_bytes_a_path_or_a_binary_file(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="str"):
        Attachment("a.txt", "is this a path or the content?")  # type: ignore[arg-type]
    (tmp_path / "t.txt").write_text("text")
    with (tmp_path / "t.txt").open() as text_file, pytest.raises(TypeError, match="'rb'"):
        Attachment("t.txt", text_file)  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError):
        Attachment("x.pdf", tmp_path / "missing.pdf")
    assert Attachment("x.unknown-ext", b"").content_type == "application/octet-stream"
