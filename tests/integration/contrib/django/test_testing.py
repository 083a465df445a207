"""mailout.testing's Django flavour: the backend still writes rows in tests, the
``outbox`` fixture reads them (inside the test's transaction too) and delivers them."""

from __future__ import annotations

import pytest
from django.core.mail import EmailMultiAlternatives, send_mail
from django.db import transaction
from sqlalchemy import Engine

from mailout.contrib.django.testing import DjangoOutbox
from mailout.contrib.django.testing import outbox as outbox  # the fixture under test
from tests.djangoproject.shop.models import Order
from tests.support.django_fixtures import DATABASES

# Each test asks for ``outside_engine`` first: it empties the outbox, which Django's
# flush between tests leaves alone (unmanaged tables).


@pytest.mark.django_db(databases=list(DATABASES))
def test_rows_written_in_the_tests_transaction_are_seen(
    using: str, outside_engine: Engine, outbox: DjangoOutbox,
) -> None:
    with transaction.atomic(using=using):
        Order.objects.using(using).create(number="T1", email="t@example.com")
        send_mail("Order T1", "Thanks", None, ["t@example.com"])
    [queued] = outbox.assert_enqueued(to="t@example.com", subject="Order T1", count=1)
    assert queued.status == "pending"
    with pytest.raises(RuntimeError, match="transaction=True"):
        outbox.deliver_all()


@pytest.mark.django_db(databases=list(DATABASES), transaction=True)
def test_deliver_all_renders_what_the_backend_queued(
    using: str, outside_engine: Engine, outbox: DjangoOutbox,
) -> None:
    email = EmailMultiAlternatives("Welcome", "Hello Ann", None, ["ann@example.com"])
    email.attach_alternative("<p>Hello Ann</p>", "text/html")
    email.send()
    [delivered] = outbox.deliver_all()
    assert (delivered.subject, delivered.text, delivered.html) == (
        "Welcome", "Hello Ann", "<p>Hello Ann</p>")
    assert outbox.assert_enqueued(to="ann@example.com")[0].status == "sent"
