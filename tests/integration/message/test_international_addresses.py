"""International addresses (issue 14, item 5): an IDNA domain is sent in its ASCII
form, a non-ASCII local part is refused at enqueue, and a row that still fails on
one never shows the full address in the log or the attempts table."""

from __future__ import annotations

import logging

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import run_until_idle, settings_for
from sqlalchemy import select, update

from mailout import db
from mailout.db.schema import attempts, messages
from mailout.exceptions import InvalidMessage
from mailout.outbox import EnqueueSettings, enqueue

SETTINGS = EnqueueSettings(message_id_domain="example.com")


def test_an_idna_domain_is_sent_in_ascii(sqlite_url: str, smtp_server: SmtpTestServer) -> None:
    engine = db.make_engine(sqlite_url)
    with engine.begin() as conn:
        enqueue(conn, to="user@xn--bcher-kva.example", subject="Hi", text="x",
                settings=SETTINGS)
        enqueue(conn, to="Ann <ann@bücher.example>", subject="Hi", text="x",
                settings=SETTINGS)
    run_until_idle(settings_for(sqlite_url, smtp_server))
    with engine.connect() as conn:
        assert set(conn.execute(select(messages.c.status)).scalars()) == {"sent"}
    engine.dispose()
    assert sorted(m.rcpt_tos for m in smtp_server.messages) == [
        ("ann@xn--bcher-kva.example",), ("user@xn--bcher-kva.example",)]


def test_a_non_ascii_local_part_is_refused_at_enqueue(sqlite_url: str) -> None:
    engine = db.make_engine(sqlite_url)
    with pytest.raises(InvalidMessage, match="SMTPUTF8") as caught, engine.begin() as conn:
        enqueue(conn, to="jürgen@example.com", subject="Hi", text="x", settings=SETTINGS)
    assert caught.value.field == "to"
    with pytest.raises(InvalidMessage) as caught, engine.begin() as conn:
        enqueue(conn, to="Jürgen <jürgen@example.com>", subject="Hi", text="x",
                settings=SETTINGS)
    assert caught.value.field == "to"
    engine.dispose()


def test_a_failing_address_is_masked_in_the_log_and_the_attempts_table(
    sqlite_url: str, smtp_server: SmtpTestServer, caplog: pytest.LogCaptureFixture,
) -> None:
    engine = db.make_engine(sqlite_url)
    with engine.begin() as conn:
        row = enqueue(conn, to="placeholder@example.com", subject="Hi", text="x",
                      settings=SETTINGS)
        # A row written before enqueue refused it (or by another writer).
        conn.execute(update(messages).where(messages.c.id == row.id)
                     .values(recipient="jürgen.privat@example.com"))
    with caplog.at_level(logging.DEBUG, logger="mailout"):
        run_until_idle(settings_for(sqlite_url, smtp_server))
    with engine.connect() as conn:
        status = conn.execute(select(messages.c.status)).scalar_one()
        detail = conn.execute(select(attempts.c.detail)).scalar_one()
    engine.dispose()
    assert status == "failed"
    assert "jürgen" not in detail
    assert "privat@" not in detail
    assert "jürgen" not in caplog.text
    assert "privat@" not in caplog.text
    assert "***@example.com" in detail
