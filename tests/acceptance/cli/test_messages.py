"""``mailout enqueue`` with several recipients, attachments and a locale, and what
``show``, ``trace`` and ``purge`` say about such messages: the executable as a user
runs it, against a SQLite file and the real SMTP test server."""

from __future__ import annotations

import json
from email.parser import BytesParser
from email.policy import strict
from pathlib import Path

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import worker_env
from sqlalchemy import Float, bindparam, func, select, update

from mailout import db
from mailout.db.schema import attachments, db_now_plus, messages
from tests.acceptance.cli.test_main import mailout, mailout_json

pytestmark = pytest.mark.slow  # the mailout executable, run many times over


def test_enqueue_with_cc_bcc_attachments_then_show_trace_and_purge(
    tmp_path: Path, smtp_server: SmtpTestServer
) -> None:
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    env = worker_env(url, smtp_server)
    mailout("db", "upgrade", env=env)
    invoice = tmp_path / "factura ñ.pdf"
    invoice.write_bytes(b"%PDF-1.4 invoice\n")
    templates = tmp_path / "templates" / "invoice"
    (templates / "es").mkdir(parents=True)
    for folder, words in ((templates, "Your invoice"), (templates / "es", "Su factura")):
        (folder / "subject.txt").write_text(words, encoding="utf-8")
        (folder / "text.txt").write_text(words + ", {{ name }}.", encoding="utf-8")
    env["MAILOUT_TEMPLATES"] = str(tmp_path / "templates")

    done = json.loads(mailout(
        "enqueue", "--to", '"Doe, John" <john@example.com>', "--to", "gone.rcpt-550@example.com",
        "--cc", "cc@example.com", "--bcc", "hidden@example.com",
        "--reply-to", "help@shop.example.com", "--attach", str(invoice),
        "--template", "invoice", "--params", '{"name": "Juan"}', "--locale", "es-MX",
        "--key", "invoice-9", env=env).stdout)
    assert done["created"] is True
    bad = mailout("enqueue", "--to", "a@example.com", "--subject", "x", "--text", "x",
                  "--locale", "??", env=env, expect=2)
    assert "--locale" in bad.stderr
    missing = mailout("enqueue", "--to", "a@example.com", "--subject", "x", "--text", "x",
                      "--attach", str(tmp_path / "nope.pdf"), env=env, expect=2)
    assert "--attach" in missing.stderr

    assert "idle: 1 sent" in mailout("worker", "--until-idle", env=env).stdout
    [received] = smtp_server.messages
    assert set(received.rcpt_tos) == {"john@example.com", "cc@example.com",
                                      "hidden@example.com"}
    mail = BytesParser(policy=strict).parsebytes(received.data)
    assert mail["Subject"] == "Su factura"
    assert mail["To"].addresses[0].display_name == "Doe, John"
    assert "Bcc" not in mail
    [attached] = list(mail.iter_attachments())
    assert (attached.get_filename(), attached.get_content()) == ("factura ñ.pdf",
                                                                 invoice.read_bytes())

    shown = mailout_json("show", "invoice-9", env=env)
    assert shown["message"]["status"] == "sent"
    assert shown["message"]["reason"] == "partially_refused"
    assert shown["message"]["locale"] == "es-MX"
    each = {r["address"]: r for r in shown["recipients"]}
    assert each["gone.rcpt-550@example.com"]["settled"] == "failed"
    assert each["gone.rcpt-550@example.com"]["reply_code"] == 550
    assert each["gone.rcpt-550@example.com"]["enhanced_code"] == "5.1.1"
    assert each["hidden@example.com"]["kind"] == "bcc"
    assert each["john@example.com"]["settled"] == "sent"
    table = mailout("show", "invoice-9", env=env).stdout
    assert "partially_refused" in table
    assert "550 5.1.1 Mailbox does not exist" in table
    traced = mailout_json("trace", done["message_id"], env=env)
    assert traced["recipients"]["gone.rcpt-550@example.com"] == "failed 550 5.1.1"
    assert traced["recipients"]["cc@example.com"] == "sent 250 2.1.5"
    assert "recipient gone.rcpt-550@example.com" in mailout("trace", "invoice-9",
                                                            env=env).stdout

    # Purge takes the message, and then the attachment nothing refers to any more.
    engine = db.make_engine(url)
    with engine.begin() as conn:
        conn.execute(update(messages).values(finished_at=db_now_plus(
            bindparam("ago", -40 * 86400.0, Float))))
    out = mailout("purge", "--older-than", "31d", "--yes", env=env).stdout
    assert "purged 1 messages" in out
    assert "1 attachments no message refers to" in out
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(attachments)).scalar_one() == 0
    engine.dispose()
