"""What Django would send is what leaves (issue 31, item 3): a property test.

Hypothesis builds Django messages (empty and unicode subjects, lazy strings, display
names, IDN and local-only addresses, ``localhost`` senders, long and non-Latin
bodies, HTML and ``text/calendar`` alternatives, binary, text and ``message/rfc822``
attachments, extra headers). Each goes through both paths to a real SMTP server over
TCP: Django's own SMTP backend, and mailout's backend then its worker. The server
must receive the same envelope and the same bytes. Message-ID and Date are given
(the one part of a message that differs by design from one build to the next) and
the random multipart boundaries are seeded alike.
"""

from __future__ import annotations

import random
import uuid
from email import generator as email_generator
from email import message_from_bytes, policy
from typing import Any

import pytest
from bench.support.smtpserver import ReceivedMessage, SmtpTestServer
from bench.support.workers import run_until_idle, settings_for
from django.core.mail import EmailMessage, EmailMultiAlternatives, get_connection
from django.utils.functional import lazy
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mailout.exceptions import InvalidMessage
from tests.support.django_fixtures import BACKEND

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
DATE = "Thu, 01 Jan 2026 00:00:00 -0000"

# Text for subjects, names and header values: no lone surrogates (not encodable) and no
# control characters (Cc). Django refuses only CR and LF; mailout refuses every
# control character that reaches a header line raw (test_whole.py), a difference kept
# on purpose.
_line = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=90)
_body = st.text(st.characters(blacklist_categories=("Cs",)), max_size=1500) | st.sampled_from([
    "", "Content", "line\nline\n", ".\n.leading dot\n", "x" * 1200,
    "\u0412 \u044e\u0436\u043d\u044b\u0445 \u043c\u043e\u0440\u044f\u0445 " * 60,  # Django's
])  # long-line test: under 998 characters, over 998 bytes as UTF-8
_address = st.sampled_from([
    "to@example.com", "webmaster@localhost", "root@localhost", "django", "tester",
    "to@öäü.com", "Jörg <joerg@example.com>", '"Doe, Ann" <ann@example.com>',
    "Firstname Sürname <fs@example.com>", "UPPER@Example.COM",
])


def _lazy(value: str) -> Any:
    return lazy(lambda: value, str)()


@st.composite
def django_messages(draw: st.DrawFn) -> EmailMultiAlternatives:
    to = draw(st.lists(_address, min_size=1, max_size=3, unique=True))
    others = [a for a in ["cc@example.com", "Cc Name <cc2@example.com>", "bcc@example.com",
                          "bcc2@öäü.com"] if a not in to]
    cc = draw(st.lists(st.sampled_from(others[:2]), max_size=2, unique=True))
    bcc = draw(st.lists(st.sampled_from(others[2:]), max_size=2, unique=True))
    subject = draw(_line)
    email = EmailMultiAlternatives(
        _lazy(subject) if draw(st.booleans()) else subject, draw(_body),
        draw(_address), to, cc=cc, bcc=bcc,
        reply_to=draw(st.lists(_address, max_size=1)),
        headers={"Date": DATE, "X-Tag": draw(_line)} if draw(st.booleans()) else {"Date": DATE},
    )
    if draw(st.booleans()):
        email.attach_alternative(draw(_body), "text/html")
    if draw(st.booleans()):
        email.attach_alternative("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nEND:VCALENDAR\r\n",
                                 "text/calendar")
    for kind in draw(st.lists(st.sampled_from(["binary", "text", "rfc822"]), max_size=2)):
        if kind == "binary":
            email.attach("data.bin", draw(st.binary(max_size=300)), "application/octet-stream")
        elif kind == "text":
            email.attach("notes.txt", draw(_body), "text/plain")
        else:
            email.attach(EmailMessage("Inner", "inner", "a@example.com", ["b@example.com"],
                                      headers={"Date": DATE, "Message-ID": "<inner@example.com>"}
                                      ).message())
    return email


def _send(email: EmailMultiAlternatives, seed: int, message_id: str, **backend: Any) -> None:
    email.extra_headers["Message-ID"] = message_id
    # The multipart boundaries the stdlib's generator draws, from a seeded generator of
    # their own (the global one is Hypothesis').
    drawn, email_generator.random = email_generator.random, random.Random(seed)  # type: ignore[assignment]
    try:
        assert get_connection(**backend).send_messages([email]) == 1
    finally:
        email_generator.random = drawn


def _decoded(data: bytes) -> list[tuple[str, Any]]:
    """Every part's headers and content, as a reader sees them."""
    parsed = message_from_bytes(data, policy=policy.compat32)
    return [(str(list(p.items())), p.get_payload(decode=True)) for p in parsed.walk()]


def _same(django: ReceivedMessage, ours: ReceivedMessage) -> None:
    assert ours.mail_from == django.mail_from
    assert ours.rcpt_tos == django.rcpt_tos
    assert _decoded(ours.data) == _decoded(django.data)
    assert ours.data == django.data


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(emails=st.lists(django_messages(), min_size=1, max_size=4))
def test_mailout_sends_what_djangos_smtp_backend_sends(
    emails: list[EmailMultiAlternatives], smtp_server: SmtpTestServer, settings: Any,
) -> None:
    from mailout.contrib.django.connection import database_url

    settings.EMAIL_BACKEND = BACKEND
    smtp_server.reset()
    smtp = {"backend": SMTP_BACKEND, "host": smtp_server.host, "port": smtp_server.port}
    sendable = []
    for i, email in enumerate(emails):
        try:
            _send(email, i, f"<fidelity-{uuid.uuid4().hex}@example.com>", **smtp)
        except ValueError:  # Django cannot build it (an address it cannot write)
            with pytest.raises(InvalidMessage):  # mailout's refusal, a ValueError too
                _send(email, i, email.extra_headers["Message-ID"], backend=BACKEND)
        else:
            sendable.append((i, email))
    event(f"{len(sendable)} of {len(emails)} sendable by Django's SMTP backend")
    by_django = smtp_server.wait_for_messages(len(sendable))
    smtp_server.reset()
    for i, email in sendable:  # the same Message-ID and seed: the same message
        _send(email, i, email.extra_headers["Message-ID"], backend=BACKEND)
    run_until_idle(settings_for(database_url("default"), smtp_server))
    # Each message came from a send_messages call of its own: no order to keep.
    by_mailout = {m.message_id: m for m in smtp_server.wait_for_messages(len(sendable))}
    assert len(by_mailout) == len(sendable)
    for django in by_django:
        _same(django, by_mailout[django.message_id])
