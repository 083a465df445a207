"""Attachment storage on SQLite, PostgreSQL and MariaDB: stored once per content, in the
caller's transaction, size-limited at enqueue, and purged once nothing refers to it."""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select, update

from mailout import Attachment, InvalidMessage, Message
from mailout.db import attachments as stored
from mailout.db import operator, purging
from mailout.db.schema import attachments, message_attachments, messages
from mailout.message import compose
from mailout.outbox import EnqueueSettings, enqueue, enqueue_many

SETTINGS = EnqueueSettings(message_id_domain="test.example.com")
TERMS = b"%PDF terms and conditions " * 4_000  # ~100 KB


def count(engine: Engine, table: object) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar_one()  # type: ignore[arg-type]


@pytest.mark.slow
def test_one_content_on_a_thousand_messages_is_stored_once(engine: Engine) -> None:
    with engine.begin() as conn:
        enqueue_many(conn, [
            Message(to=f"u{i}@example.com", subject="Invoice", text="x", key=f"inv-{i}",
                    attachments=[Attachment(f"invoice-{i}.pdf", b"invoice %d" % i),
                                 Attachment("terms.pdf", TERMS)])
            for i in range(500)], settings=SETTINGS)
    with engine.begin() as conn:  # a later transaction finds the content already there
        for i in range(500, 1000):
            enqueue(conn, to=f"u{i}@example.com", subject="Invoice", text="x", key=f"inv-{i}",
                    attachments=[Attachment(f"invoice-{i}.pdf", b"invoice %d" % i),
                                 Attachment("terms.pdf", TERMS)], settings=SETTINGS)

    assert count(engine, message_attachments) == 2000
    assert count(engine, attachments) == 1001  # 1,000 invoices and one terms PDF
    with engine.connect() as conn:
        sizes = conn.execute(select(attachments.c.size).where(
            attachments.c.sha256 == compose.digest(TERMS))).scalars().all()
        some = conn.execute(select(messages.c.id).where(messages.c.idempotency_key == "inv-7")
                            ).scalar_one()
        items = stored.for_message(conn, some)
    assert sizes == [len(TERMS)]
    assert [(a.filename, a.content_type, a.content) for a in items] == [
        ("invoice-7.pdf", "application/pdf", b"invoice 7"),
        ("terms.pdf", "application/pdf", TERMS)]


def test_attachments_roll_back_with_the_transaction(engine: Engine) -> None:
    with engine.connect() as conn:
        transaction = conn.begin()
        enqueue(conn, to="a@example.com", subject="x", text="x",
                attachments=[Attachment("a.pdf", b"a")], settings=SETTINGS)
        transaction.rollback()  # the business event failed
    assert count(engine, attachments) == count(engine, message_attachments) == 0


def test_paths_and_files_are_read_and_the_type_is_guessed(engine: Engine,
                                                          tmp_path: Path) -> None:
    path = tmp_path / "photo.jpeg"
    path.write_bytes(b"\xff\xd8 jpeg")
    with engine.begin() as conn:
        rid = enqueue(conn, to="a@example.com", subject="x", text="x", settings=SETTINGS,
                      attachments=[Attachment("photo.jpeg", path),
                                   Attachment("notes.txt", io.BytesIO(b"hello")),
                                   Attachment("data.bin", b"\x00\x01", "Application/X-Thing")]
                      ).id
        items = stored.for_message(conn, rid)
    assert [(a.filename, a.content_type, a.content) for a in items] == [
        ("photo.jpeg", "image/jpeg", b"\xff\xd8 jpeg"), ("notes.txt", "text/plain", b"hello"),
        ("data.bin", "application/x-thing", b"\x00\x01")]


def test_size_limits_name_the_file_and_write_nothing(engine: Engine) -> None:
    small = EnqueueSettings(max_attachment_bytes=1_000, max_message_bytes=3_000)
    with engine.begin() as conn:
        with pytest.raises(InvalidMessage) as one:
            enqueue(conn, to="a@example.com", subject="x", text="x", settings=small,
                    attachments=[Attachment("ok.pdf", b"x" * 10),
                                 Attachment("huge-scan.pdf", b"x" * 1_001)])
        # Each file fits, the message does not once base64 adds its third.
        with pytest.raises(InvalidMessage) as whole:
            enqueue(conn, to="a@example.com", subject="x", text="x", settings=small,
                    attachments=[Attachment(f"part-{i}.pdf", b"x" * 900) for i in range(3)])
    assert one.value.field == "attachments"
    assert "'huge-scan.pdf' is 1001 bytes" in one.value.reason
    assert "MAILOUT_MAX_ATTACHMENT_BYTES" in one.value.reason
    assert whole.value.field == "attachments"
    assert "'part-0.pdf' (900 bytes)" in whole.value.reason
    assert "MAILOUT_MAX_MESSAGE_BYTES" in whole.value.reason
    assert count(engine, messages) == count(engine, attachments) == 0


@pytest.mark.parametrize(("attachment", "words"), [
    (Attachment("a\nb.pdf", b"x"), "control characters"),
    (Attachment("dir/a.pdf", b"x"), "path separators"),
    (Attachment("a.pdf", b"x", "pdf"), "type/subtype"),
    (Attachment("my logo.png", b"x", inline=True), "give one with cid="),
])
def test_bad_attachments_are_refused(engine: Engine, attachment: Attachment,
                                     words: str) -> None:
    with engine.begin() as conn, pytest.raises(InvalidMessage) as caught:
        enqueue(conn, to="a@example.com", subject="x", text="x", attachments=[attachment],
                settings=SETTINGS)
    assert caught.value.field == "attachments"
    assert words in caught.value.reason


def test_purge_removes_contents_no_message_refers_to(engine: Engine) -> None:
    with engine.begin() as conn:
        old = enqueue(conn, to="a@example.com", subject="x", text="x", key="old",
                      attachments=[Attachment("only-old.pdf", b"old"),
                                   Attachment("shared.pdf", b"shared")], settings=SETTINGS).id
        enqueue(conn, to="b@example.com", subject="x", text="x", key="new",
                attachments=[Attachment("shared.pdf", b"shared")], settings=SETTINGS)
        conn.execute(update(messages).where(messages.c.id == old).values(
            status="sent", finished_at=operator.db_now_plus(operator.bindparam("x", -90_000.0,
                                                                         operator.Float))))
    with engine.begin() as conn:
        assert stored.count_orphans(conn) == 0
        assert purging.purge(conn, timedelta(days=1), ["sent"]).messages == 1
        assert stored.count_orphans(conn) == 1
        assert stored.purge_orphans(conn) == 1
        assert stored.purge_orphans(conn) == 0
    with engine.connect() as conn:
        left = conn.execute(select(attachments.c.sha256)).scalars().all()
    assert left == [compose.digest(b"shared")]
    assert count(engine, message_attachments) == 1


def test_an_attachment_over_the_servers_packet_limit_is_refused_not_dropped(
    mysql_url: str,
) -> None:
    """MariaDB drops the connection on a statement over max_allowed_packet; enqueue
    refuses it first, with the limit in the error, and the transaction lives on."""
    from mailout import db

    engine = db.make_engine(mysql_url)
    with engine.connect() as conn:
        packet = int(conn.exec_driver_sql("SELECT @@max_allowed_packet").scalar_one())
    big = Attachment("scan.tiff", b"\0" * (packet // 2 + 1))  # NUL bytes go escaped: x2
    roomy = EnqueueSettings(message_id_domain="test.example.com",
                            max_attachment_bytes=packet * 2, max_message_bytes=packet * 4)
    with engine.begin() as conn:
        with pytest.raises(InvalidMessage, match="max_allowed_packet") as err:
            enqueue(conn, to="a@example.com", subject="Scan", text="x", key="big",
                    attachments=[big], settings=roomy)
        assert err.value.field == "attachments"
        assert "scan.tiff" in err.value.reason
        # The same transaction goes on: nothing was sent, the connection is whole.
        enqueue(conn, to="a@example.com", subject="Scan", text="x", key="small",
                attachments=[Attachment("note.txt", b"fits")], settings=roomy)
    assert count(engine, messages) == 1
    assert count(engine, attachments) == 1
    engine.dispose()


def test_a_body_over_the_servers_packet_limit_is_refused_as_sent(mysql_url: str) -> None:
    """The size that counts is the statement's: quotes go escaped, two bytes each."""
    from mailout import db

    engine = db.make_engine(mysql_url)
    with engine.connect() as conn:
        packet = int(conn.exec_driver_sql("SELECT @@max_allowed_packet").scalar_one())
    quotes = "'" * (packet // 2 + 1)  # fits the packet as text, not once escaped
    roomy = EnqueueSettings(message_id_domain="test.example.com",
                            max_message_bytes=packet * 4)
    with engine.begin() as conn:
        with pytest.raises(InvalidMessage, match="max_allowed_packet") as err:
            enqueue(conn, to="a@example.com", subject="Quotes", text=quotes, key="q",
                    settings=roomy)
        assert err.value.field == "text"
    assert count(engine, messages) == 0
    engine.dispose()
