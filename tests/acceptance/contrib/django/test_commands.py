"""``manage.py mailout``: a Django user's mail goes out through the management command.

The message is queued by ``send_mail``/``EmailMultiAlternatives`` in a committed
``atomic()`` block, the worker is ``manage.py mailout worker --until-idle`` in its own
process (no database URL given: it reads DATABASES), the SMTP server is real, and
the message is parsed from the bytes it received.
"""

from __future__ import annotations

import json
from email import message_from_bytes, policy
from email.message import EmailMessage as ParsedMessage

import pytest
from bench.support.smtpserver import SmtpTestServer
from django.core.mail import EmailMultiAlternatives
from django.core.management import CommandError, call_command
from django.db import transaction
from sqlalchemy import Engine

from tests.djangoproject.shop.models import Order
from tests.support.django_fixtures import DATABASES, manage_py

pytestmark = pytest.mark.django_db(databases=list(DATABASES), transaction=True)

PDF = b"%PDF-1.4\n" + bytes(range(256)) * 40  # binary: survives only a correct base64 trip


def _invoice(number: str) -> EmailMultiAlternatives:
    email = EmailMultiAlternatives(
        f"Invoice {number}", "Your invoice is attached.", "Billing <billing@example.com>",
        ['"Doe, Ann" <ann@example.com>'], cc=["Boss <boss@example.com>"],
        bcc=["audit@example.com"], reply_to=["help@example.com"],
        headers={"X-Mailout-Key": f"invoice-{number}", "X-Campaign": "invoices"})
    email.attach_alternative(f"<p>Invoice <b>{number}</b></p>", "text/html")
    email.attach(f"invoice-{number}.pdf", PDF, "application/pdf")
    return email


@pytest.mark.slow
def test_a_django_message_arrives_whole_from_the_management_command_worker(
    using: str, outside_engine: Engine, smtp_server: SmtpTestServer, pg_server_url: str,
) -> None:
    with transaction.atomic(using=using):
        Order.objects.using(using).create(number="I-7", email="ann@example.com")
        assert _invoice("I-7").send() == 1
    proc = manage_py("mailout", "--database", using, "worker", "--until-idle",
                     pg_server_url=pg_server_url, server=smtp_server)
    assert proc.returncode == 0, proc.stderr
    [received] = smtp_server.messages
    assert sorted(received.rcpt_tos) == ["ann@example.com", "audit@example.com",
                                         "boss@example.com"]
    parsed = message_from_bytes(received.data, policy=policy.default)
    assert isinstance(parsed, ParsedMessage)
    assert parsed["Subject"] == "Invoice I-7"
    assert parsed["From"] == "Billing <billing@example.com>"
    assert parsed["To"] == '"Doe, Ann" <ann@example.com>'
    assert parsed["Cc"] == "Boss <boss@example.com>"
    assert parsed["Reply-To"] == "help@example.com"
    assert parsed["Bcc"] is None  # Bcc only in the envelope
    assert parsed["X-Campaign"] == "invoices"
    assert parsed["X-Mailout-Key"] is None  # read by the backend, never sent
    body = parsed.get_body(("plain",))
    html = parsed.get_body(("html",))
    assert body is not None
    assert html is not None
    assert body.get_content().strip() == "Your invoice is attached."
    assert html.get_content().strip() == "<p>Invoice <b>I-7</b></p>"
    [attachment] = parsed.iter_attachments()
    assert attachment.get_filename() == "invoice-I-7.pdf"
    assert attachment.get_content_type() == "application/pdf"
    assert attachment.get_content() == PDF


def test_the_command_runs_cli_commands_on_the_django_database(
    using: str, outside_engine: Engine, capsys: pytest.CaptureFixture[str],
) -> None:
    _invoice("I-8").send()
    call_command("mailout", "list", "--json")
    [row] = json.loads(capsys.readouterr().out)
    assert (row["key"], row["status"], row["recipient"]) == ("invoice-I-8", "pending",
                                                             "ann@example.com")
    call_command("mailout", "cancel", str(row["id"]), "--reason", "wrong amount")
    assert "cancelled 1" in capsys.readouterr().out


def test_a_failing_command_keeps_the_clis_exit_code(
    using: str, outside_engine: Engine, capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(CommandError) as raised:
        call_command("mailout", "show", "no-such-message")
    assert raised.value.returncode == 1
    assert "no-such-message" in capsys.readouterr().err


def test_an_unknown_alias_is_refused_by_name(using: str) -> None:
    with pytest.raises(CommandError, match="'nowhere'"):
        call_command("mailout", "--database", "nowhere", "status")
