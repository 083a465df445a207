"""The messages of one ``send_messages`` call go out in call order (issue 31, item 6).

Django's SMTP backend sends them one after the other on one connection. mailout's
worker sends up to MAILOUT_CONCURRENCY messages at once over several connections, so
the backend enqueues a call's messages as an ordered batch: the worker starts each
one's first attempt only after the one before it finished (tests/unit/worker covers
the lane itself). Real worker, real SMTP server, both databases.
"""

from __future__ import annotations

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import run_until_idle, settings_for
from django.core.mail import EmailMessage, get_connection, send_mass_mail
from sqlalchemy import Engine, select

from mailout.contrib.django.connection import database_url
from mailout.db.schema import messages
from tests.support.django_fixtures import DATABASES

pytestmark = pytest.mark.django_db(databases=list(DATABASES), transaction=True)

COUNT = 30  # three times the default concurrency: every slot and connection in play


def test_one_send_messages_call_goes_out_in_call_order(
    using: str, outside_engine: Engine, smtp_server: SmtpTestServer,
) -> None:
    emails = [EmailMessage(f"#{i}", "x", None, [f"to-{i}@example.com"]) for i in range(COUNT)]
    assert get_connection().send_messages(emails) == COUNT
    run_until_idle(settings_for(database_url(using), smtp_server, MAILOUT_CONCURRENCY="10"))
    received = smtp_server.wait_for_messages(COUNT)
    assert [m.rcpt_tos for m in received] == [(f"to-{i}@example.com",) for i in range(COUNT)]
    with outside_engine.connect() as conn:
        batches = set(conn.scalars(select(messages.c.batch)))
    assert len(batches) == 1
    assert None not in batches  # one batch token, shared by the call's rows


def test_send_mass_mail_goes_out_in_call_order(
    using: str, outside_engine: Engine, smtp_server: SmtpTestServer,
) -> None:
    datatuple = [(f"#{i}", "x", None, [f"mass-{i}@example.com"]) for i in range(COUNT)]
    assert send_mass_mail(datatuple) == COUNT
    run_until_idle(settings_for(database_url(using), smtp_server, MAILOUT_CONCURRENCY="10"))
    received = smtp_server.wait_for_messages(COUNT)
    assert [m.rcpt_tos[0] for m in received] == [f"mass-{i}@example.com" for i in range(COUNT)]
