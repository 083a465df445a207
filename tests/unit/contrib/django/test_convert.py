"""Django EmailMessage -> mailout Message: the bytes Django built, and the envelope its
SMTP backend would use (issue 31, item 3)."""

from __future__ import annotations

import random
from email.mime.image import MIMEImage

import pytest
from django.core.mail import BadHeaderError, EmailMessage, EmailMultiAlternatives
from django.utils.translation import gettext_lazy

from mailout.contrib.django.convert import BadHeader, to_message
from mailout.exceptions import InvalidMessage, MailoutError
from mailout.models import Mailbox

PNG = b"\x89PNG\r\n\x1a\n" + bytes(64)
FIXED = {"Message-ID": "<fixed@example.com>", "Date": "Thu, 01 Jan 2026 00:00:00 -0000"}


def _django_bytes(email: EmailMessage) -> bytes:
    random.seed(7)  # the multipart boundaries
    return email.message().as_bytes(linesep="\r\n")


def _stored(email: EmailMessage) -> bytes:
    random.seed(7)
    mime = to_message(email).mime
    assert mime is not None
    return mime


def test_the_stored_bytes_are_the_ones_djangos_smtp_backend_writes() -> None:
    email = EmailMultiAlternatives("Chère maman", "Je t'aime très fort\n" * 3,
                                   '"Firstname Sürname" <from@example.com>',
                                   ["to@example.com"], headers=FIXED)
    email.attach_alternative("<p>HTML</p>", "text/html")
    email.attach_alternative("BEGIN:VCALENDAR\r\nEND:VCALENDAR\r\n", "text/calendar")
    email.attach("notes.txt", "Text ünïcode", "text/plain")
    email.attach(EmailMessage("Inner", "inner body", "a@example.com", ["b@example.com"])
                 .message())  # a message/rfc822 part
    image = MIMEImage(PNG, "png")
    image.add_header("Content-ID", "<logo>")
    email.attach(image)
    assert _stored(email) == _django_bytes(email)


def test_an_empty_message_with_djangos_defaults_is_stored() -> None:
    message = to_message(EmailMessage(to=["to@example.com"], headers=FIXED))
    # DEFAULT_FROM_EMAIL of the test project: "Shop <shop@example.com>"
    assert (message.subject, message.sender) == ("", "shop@example.com")
    assert message.mime is not None
    assert message.mime.endswith(b"\r\n\r\n")  # Django's empty body, no line end added


def test_the_envelope_is_djangos_idn_local_only_and_lazy() -> None:
    email = EmailMessage("S", "b", "from@öäü.com", ["to@öäü.com"],
                         cc=[gettext_lazy("cc1"), "django"], bcc=["Audit <audit@example.com>"])
    message = to_message(email)
    assert message.sender == "from@xn--4ca9at.com"
    assert message.to == [Mailbox("to@xn--4ca9at.com")]
    assert message.cc == [Mailbox("cc1"), Mailbox("django")]
    assert message.bcc == [Mailbox("audit@example.com", "Audit")]  # the name, for the console


def test_own_headers_are_read_in_any_case_removed_and_the_callers_message_kept() -> None:
    headers = {"x-mailout-key": "k-1", "X-MAILOUT-QUEUE": "critical", "X-Other": "kept"}
    email = EmailMessage("S", "t", None, ["b@example.com"], headers=dict(headers))
    message = to_message(email, queue="default")
    assert (message.key, message.queue) == ("k-1", "critical")
    assert message.mime is not None
    head = message.mime.partition(b"\r\n\r\n")[0]
    assert b"X-Other: kept" in head
    assert b"mailout" not in head.lower()
    assert email.extra_headers == headers


def test_a_header_django_refuses_is_a_mailout_error_and_djangos_own() -> None:
    email = EmailMessage("Subject\nBcc: victim@example.com", "b", None, ["b@example.com"])
    with pytest.raises(BadHeader) as raised:
        to_message(email)
    assert isinstance(raised.value, MailoutError)
    assert isinstance(raised.value, BadHeaderError)
    assert raised.value.field == "headers"


def test_an_address_django_cannot_parse_is_refused_by_name() -> None:
    with pytest.raises(InvalidMessage) as raised:
        to_message(EmailMessage("S", "b", None, ["a@b@c"]))
    assert raised.value.field == "to"
