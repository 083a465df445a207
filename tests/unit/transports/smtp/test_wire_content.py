"""What the SMTP transport writes after the 354: canonical line ends and dot-stuffing."""

from __future__ import annotations

import pytest

from mailout.transports.smtp.transaction import wire_content


@pytest.mark.parametrize(("given", "written"), [
    (b"a\r\nb\r\n", b"a\r\nb\r\n"),
    (b"a\r\nb", b"a\r\nb\r\n"),  # a final CRLF is added
    (b".a\r\nb\r\n", b"..a\r\nb\r\n"),  # the first line is a line start too
    (b"a\r\n.b\r\n..c\r\nd.\r\n", b"a\r\n..b\r\n...c\r\nd.\r\n"),
    (b"a\r\n.\r\nb\r\n", b"a\r\n..\r\nb\r\n"),  # never an early end of data
    (b"a\nb\n", b"a\r\nb\r\n"),  # bare LF
    (b"a\rb\r", b"a\r\nb\r\n"),  # bare CR
    (b"a\n.\r\nb\r.\n", b"a\r\n..\r\nb\r\n..\r\n"),  # mixed, with dots after each kind
    (b"a\r\n\r\nb\r\n", b"a\r\n\r\nb\r\n"),  # a blank line is not a bare CR or LF
])
def test_line_ends_and_dot_stuffing(given: bytes, written: bytes) -> None:
    assert wire_content(given) == written


def test_canonical_content_without_dots_is_not_copied() -> None:
    content = b"Subject: x\r\n\r\n" + b"line of text\r\n" * 500
    assert wire_content(content) is content


@pytest.mark.parametrize(("given", "written"), [
    (b"a\r\nb\r\n", b"a\r\nb\r\n"),
    (b".a\r\nb\r\n", b"..a\r\nb\r\n"),
    (b"a\r\n.b\r\n..c\r\nd.\r\n", b"a\r\n..b\r\n...c\r\nd.\r\n"),
    (b"a\r\n.\r\nb\r\n", b"a\r\n..\r\nb\r\n"),
])
def test_content_vouched_crlf_only_is_still_dot_stuffed(given: bytes, written: bytes) -> None:
    assert wire_content(given, crlf_only=True) == written
    assert wire_content(given) == written  # the same bytes as when scanned


def test_content_vouched_crlf_only_is_not_scanned_for_line_ends() -> None:
    # What the flag means: the line ends are taken as they are (the renderer's promise,
    # checked in test_mime and test_render); a bare LF would go out unchanged.
    assert wire_content(b"a\nb\r\n", crlf_only=True) == b"a\nb\r\n"
    assert wire_content(b"a\nb\r\n") == b"a\r\nb\r\n"
