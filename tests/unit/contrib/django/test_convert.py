"""Django EmailMessage -> mailout Message: every part carried over, or refused by name."""

from __future__ import annotations

from email.mime.image import MIMEImage

import pytest
from django.core.mail import EmailMessage, EmailMultiAlternatives

from mailout.contrib.django.convert import to_message
from mailout.exceptions import InvalidMessage

PNG = b"\x89PNG\r\n\x1a\n" + bytes(64)


def test_an_inline_image_keeps_its_content_id() -> None:
    email = EmailMultiAlternatives("S", "t", "a@example.com", ["b@example.com"])
    email.attach_alternative('<img src="cid:logo">', "text/html")
    image = MIMEImage(PNG, "png")
    image.add_header("Content-ID", "<logo>")
    email.attach(image)
    [part] = to_message(email).attachments
    assert (part.inline, part.cid, part.content_type, part.content) == (
        True, "logo", "image/png", PNG)


def test_an_html_body_is_the_html_part() -> None:
    email = EmailMessage("S", "<p>x</p>", None, ["b@example.com"])
    email.content_subtype = "html"
    message = to_message(email)
    assert (message.text, message.html) == (None, "<p>x</p>")


def test_own_headers_are_read_in_any_case_and_removed() -> None:
    email = EmailMessage("S", "t", None, ["b@example.com"],
                         headers={"x-mailout-key": "k-1", "X-MAILOUT-QUEUE": "critical",
                                  "X-Other": "kept"})
    message = to_message(email, queue="default")
    assert (message.key, message.queue, message.headers) == ("k-1", "critical",
                                                             {"X-Other": "kept"})


@pytest.mark.parametrize(("alternatives", "reason"), [
    ([("x", "text/calendar")], "not 'text/calendar'"),
    ([("<p>1</p>", "text/html"), ("<p>2</p>", "text/html")], "two HTML alternatives"),
])
def test_what_mailout_cannot_carry_is_refused(alternatives: list[tuple[str, str]],
                                              reason: str) -> None:
    email = EmailMultiAlternatives("S", "t", None, ["b@example.com"])
    for content, mimetype in alternatives:
        email.attach_alternative(content, mimetype)
    with pytest.raises(InvalidMessage, match=reason) as raised:
        to_message(email)
    assert raised.value.field == "alternatives"
