"""Operator commands print hostile data without running it (issue 14, item 2).

An SMTP reply carrying terminal escape sequences, subjects, keys and pause reasons
that look like Rich markup, and control characters stored in old rows: `list`,
`show`, `trace` and `status` exit 0, print them visibly escaped and never as live
sequences, and `--json` keeps them exact.
"""

from __future__ import annotations

import json

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import worker_env
from sqlalchemy import update

from mailout import db
from mailout.db.schema import messages
from mailout.outbox import EnqueueSettings, enqueue
from mailout.transports.smtp.outcome import Stage
from tests.acceptance.cli.test_main import mailout

pytestmark = pytest.mark.slow  # the mailout executable, run many times over

ESC = "\x1b"
# An OSC window title, an OSC-8 hyperlink and a colour, each a live sequence if printed raw.
HOSTILE_REPLY = (f"5.1.1 no {ESC}]0;pwned{ESC}\\ such {ESC}]8;;https://evil.example/{ESC}\\"
                 f"user{ESC}]8;;{ESC}\\ {ESC}[31mred")
SETTINGS = EnqueueSettings(message_id_domain="example.com")


def _no_live_sequences(out: str) -> None:
    assert ESC not in out
    assert "\x07" not in out
    assert "\x9b" not in out


def test_hostile_replies_markup_and_control_characters_print_safely(
    sqlite_url: str, smtp_server: SmtpTestServer,
) -> None:
    smtp_server.fail("victim@example.com", Stage.RCPT, 550, HOSTILE_REPLY)
    env = {"MAILOUT_DATABASE_URL": sqlite_url}
    engine = db.make_engine(sqlite_url)
    with engine.begin() as conn:
        bounced = enqueue(conn, to="victim@example.com", subject="Hello", text="x",
                          key="bounced", settings=SETTINGS)
        marked = enqueue(conn, to="ann@example.com", subject="Order [/ref] shipped",
                         text="x", key="key-[/x]-[bold]", settings=SETTINGS)
        stored = enqueue(conn, to="bob@example.com", subject="old row", text="x",
                         key="stored-control", settings=SETTINGS)
        # A row written before enqueue refused control characters in subjects.
        conn.execute(update(messages).where(messages.c.id == stored.id)
                     .values(subject=f"Title {ESC}]0;pwned{ESC}\\ \x9b31m here"))
    engine.dispose()
    mailout("worker", "--until-idle", env=worker_env(sqlite_url, smtp_server), expect=5)
    mailout("pause", "--queue", "bulk", "--reason", "[/bold]", env=env)

    shown = mailout("show", str(bounced.id), env=env).stdout
    _no_live_sequences(shown)
    assert "\\x1b]0;pwned" in shown  # visible, escaped

    listing = mailout("list", env=env).stdout
    _no_live_sequences(listing)
    assert "Order [/ref] shipped" in listing
    assert "\\x1b]0;pwned" in listing

    for ref in ("key-[/x]-[bold]", str(stored.id)):
        traced = mailout("trace", ref, env=env).stdout
        _no_live_sequences(traced)
    assert "key-[/x]-[bold]" in mailout("show", str(marked.id), env=env).stdout

    status = mailout("status", env=env).stdout
    _no_live_sequences(status)
    assert "[/bold]" in status

    exact = json.loads(mailout("show", str(bounced.id), "--json", env=env).stdout)
    assert any(ESC in (a["reply_text"] or "") for a in exact["attempts"])
    rows = json.loads(mailout("list", "--json", env=env).stdout)
    assert f"Title {ESC}]0;pwned{ESC}\\ \x9b31m here" in [r["subject"] for r in rows]


def test_the_terminal_helper_writes_control_characters_out() -> None:
    from mailout.cli.terminal import clean, one_line

    assert clean(f"a{ESC}[31mb\x9bc\u202ed\x07") == "a\\x1b[31mb\\x9bc\\u202ed\\x07"
    assert clean("[/bold] stays as typed") == "[/bold] stays as typed"
    assert one_line("two\nlines\r\n") == "two\\nlines\\r\\n"
    assert clean(None) == "-"
