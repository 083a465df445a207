"""Suppression at send time, and the loop closed end to end: a message sent by a real
worker to the test SMTP server, its signed bounce posted to a real
``mailout webhooks serve`` process over HTTP, the event on the row, the address
suppressed, and the next enqueue to it cancelled (``suppressed``) with no send."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.support import webhooks as w
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import run_until_idle, settings_for
from sqlalchemy import Engine, select

from mailout.db import delivery_events, suppressions
from mailout.db.schema import attempts, messages
from mailout.outbox import EnqueueSettings, enqueue

MAILOUT = str(Path(sys.executable).parent / "mailout")
CFG = EnqueueSettings(message_id_domain="shop.example")


def _enqueue(engine: Engine, to: str, key: str) -> int:
    with engine.begin() as conn:
        return enqueue(conn, to=to, subject="Your order", text="Thanks", key=key,
                       settings=CFG).id


def _row(engine: Engine, rid: int) -> dict[str, object]:
    with engine.connect() as conn:
        return dict(conn.execute(select(messages).where(messages.c.id == rid)).one()._mapping)


def test_mail_to_a_suppressed_address_is_cancelled_before_the_transport(
        engine: Engine, db_url: str, smtp_server: SmtpTestServer) -> None:
    with engine.begin() as conn:
        suppressions.suppress(conn, "gone@example.com", "hard_bounce", actor="test")
    kept = _enqueue(engine, "ok@example.com", "k1")
    stopped = _enqueue(engine, "Gone@Example.com", "k2")  # case does not matter
    run_until_idle(settings_for(db_url, smtp_server))
    assert _row(engine, kept)["status"] == "sent"
    row = _row(engine, stopped)
    assert (row["status"], row["reason"], row["attempts"]) == ("cancelled", "suppressed", 0)
    assert [m.rcpt_tos for m in smtp_server.messages] == [("ok@example.com",)]
    with engine.connect() as conn:
        outcome = conn.execute(select(attempts.c.outcome, attempts.c.detail)
                               .where(attempts.c.outbox_id == stopped)).one()
    assert outcome.outcome == "cancelled"
    assert "suppression list" in outcome.detail


@pytest.fixture
def served(db_url: str) -> Iterator[str]:
    port = w.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAILOUT_", "SMTP_"))}
    env.update({"MAILOUT_DATABASE_URL": db_url, "MAILOUT_WEBHOOK_RESEND_SECRET": w.RESEND_SECRET})
    proc = subprocess.Popen([MAILOUT, "-v", "webhooks", "serve", "--port", str(port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(proc.stderr.read().decode() if proc.stderr else "") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=15)
        # Secrets and bodies never reach the server's log.
        assert w.RESEND_SECRET.encode() not in err
        assert b"550 5.1.1" not in err


def test_end_to_end_bounce_webhook_suppresses_the_next_send(
        engine: Engine, db_url: str, smtp_server: SmtpTestServer, served: str) -> None:
    first = _enqueue(engine, "reader@example.com", "order-1-confirmation")
    run_until_idle(settings_for(db_url, smtp_server))
    sent = _row(engine, first)
    assert sent["status"] == "sent"
    assert len(smtp_server.messages) == 1
    # The provider's id for this message is what the Resend webhook names; over plain
    # SMTP the test server's reply gave none, so the Message-ID is set where the
    # Resend-compatible transport would have stored Resend's id.
    provider_id = sent["provider_message_id"] or f"re_{first}"
    if sent["provider_message_id"] is None:
        from sqlalchemy import update
        with engine.begin() as conn:
            conn.execute(update(messages).where(messages.c.id == first)
                         .values(provider_message_id=provider_id))
    doc = w.resend_event("email.bounced", "reader@example.com", str(provider_id), bounce={
        "type": "Permanent", "subType": "General", "message": "550 5.1.1 user unknown"})
    status, body = w.post(f"{served}/webhooks/resend", *w.resend_request(doc))
    assert (status, body["stored"], body["matched"], body["suppressed"]) == (200, 1, 1, 1)

    show = subprocess.run([MAILOUT, "--db", db_url, "show", str(first), "--json"],
                          capture_output=True, text=True, timeout=60, check=True)
    events = json.loads(show.stdout)["events"]
    assert [(e["provider"], e["type"], e["subtype"]) for e in events] == [
        ("resend", "bounced", "hard")]
    check = subprocess.run([MAILOUT, "--db", db_url, "suppress", "check",
                            "reader@example.com", "--json"],
                           capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(check.stdout)["entry"]["reason"] == "hard_bounce"

    second = _enqueue(engine, "reader@example.com", "order-2-confirmation")
    run_until_idle(settings_for(db_url, smtp_server))
    row = _row(engine, second)
    assert (row["status"], row["reason"]) == ("cancelled", "suppressed")
    assert len(smtp_server.messages) == 1  # no second transport call


def test_verp_return_path_is_the_envelope_sender_and_links_bounce_mail(
        engine: Engine, db_url: str, smtp_server: SmtpTestServer) -> None:
    rid = _enqueue(engine, "nobody@gmail.example", "welcome-1")
    secret = "return-path-secret-0123"
    run_until_idle(settings_for(db_url, smtp_server,
                                MAILOUT_RETURN_PATH="bounces+{id}@shop.example",
                                MAILOUT_RETURN_PATH_SECRET=secret))
    [received] = smtp_server.messages
    assert received.mail_from.startswith(f"bounces+{rid}-")  # signed
    corpus = Path(__file__).resolve().parents[2] / "fixtures" / "dsn" / "postfix_hard.eml"
    report = corpus.read_bytes().replace(b"bounces+41@shop.example",
                                         received.mail_from.encode())
    # The enclosed Message-ID is not ours: only the return path can link it.
    report = report.replace(b"c0ffee00c0ffee00c0ffee00c0ffee41@shop.example", b"x@elsewhere")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAILOUT_", "SMTP_"))}
    env.update({"MAILOUT_DATABASE_URL": db_url,
                "MAILOUT_RETURN_PATH": "bounces+{id}@shop.example",
                "MAILOUT_RETURN_PATH_SECRET": secret})
    proc = subprocess.run([MAILOUT, "bounces", "ingest", "--json", "-"], input=report, env=env,
                          capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["matched"] == 1
    with engine.connect() as conn:
        [event] = delivery_events.events_for(conn, rid)
    assert (event.matched_by, event.type, event.subtype) == ("return_path", "bounced", "hard")


def test_the_check_can_be_turned_off(engine: Engine, db_url: str,
                                     smtp_server: SmtpTestServer) -> None:
    with engine.begin() as conn:
        suppressions.suppress(conn, "gone@example.com", "manual", actor="test")
    rid = _enqueue(engine, "gone@example.com", "k1")
    run_until_idle(settings_for(db_url, smtp_server, MAILOUT_SUPPRESSION="false"))
    assert _row(engine, rid)["status"] == "sent"
