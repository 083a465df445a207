"""The ``mailout`` executable, run the way a user runs it: a subprocess, real
SQLite files (and PostgreSQL where cheap), a real SMTP server on loopback.

Every subprocess pays the package's import time, so each test packs a whole
scenario into a few calls.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.tls import TestCerts
from bench.support.workers import worker_env
from sqlalchemy import Engine, Float, bindparam, update

from mailout import db
from mailout.db import operator, purging
from mailout.db.schema import db_now_plus, messages
from mailout.outbox import EnqueueSettings, enqueue
from tests.support.fixtures import AUTH_USER

MAILOUT = str(Path(sys.executable).parent / "mailout")
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
DISTINCTIVE_PASSWORD = "Zq9-not-the-password-7731xk"  # must never show up in any output


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The user's environment without mailout settings leaking in from the test run."""
    # COLUMNS and LINES go too: pytest-xdist's workers set them, and a piped mailout
    # then lays tables out at that width instead of its own piped width.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MAILOUT_", "SMTP_"))
           and k not in ("MAIL_FROM", "COLUMNS", "LINES")}
    env.update(extra or {})
    return env


def mailout(*args: str, env: dict[str, str] | None = None, expect: int | None = 0,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([MAILOUT, *args], env=clean_env(env), cwd=cwd, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    if expect is not None:
        assert proc.returncode == expect, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def mailout_json(*args: str, env: dict[str, str] | None = None) -> Any:
    return json.loads(mailout(*args, "--json", env=env).stdout)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.slow
def test_demo_runs_end_to_end_and_leaves_files(tmp_path: Path) -> None:
    out = mailout("demo", "--dir", "demo", cwd=tmp_path).stdout
    emls = sorted((tmp_path / "demo" / "mail").glob("*.eml"))
    assert len(emls) == 4  # order, reset, invoice, flaky after its retry; nobody rejected
    assert any(b"Idempotency-Key: order-1001-confirmation" in p.read_bytes() for p in emls)
    assert "Deduplicated" in out
    assert "created=False" in out
    assert "Failed: nobody@example.com" in out
    assert "550 5.1.1" in out
    assert "Retried: flaky@example.com" in out
    assert "mailout --db sqlite:///demo/mailout.db status" in out
    again = mailout("demo", "--dir", "demo", cwd=tmp_path).stdout  # starts fresh
    assert len(list((tmp_path / "demo" / "mail").glob("*.eml"))) == 4
    assert "Deduplicated" in again


@pytest.mark.slow
def test_enqueue_send_then_inspect(tmp_path: Path, smtp_server: SmtpTestServer) -> None:
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    env = worker_env(url, smtp_server)
    assert "revision" in mailout("db", "upgrade", env=env).stdout
    ok = json.loads(mailout("enqueue", "--to", "buyer@example.com", "--subject", "Order 7",
                            "--text", "SECRET-BODY-TEXT", "--key", "order-7-confirmation",
                            env=env).stdout)
    assert ok["created"] is True
    assert ok["key"] == "order-7-confirmation"
    bad = json.loads(mailout("enqueue", "--to", "rcpt-550@example.com", "--subject", "Hi",
                             "--text", "x", "--queue", "bulk", env=env).stdout)
    later = json.loads(mailout("enqueue", "--to", "later@example.com", "--subject", "Later",
                               "--text", "x", "--send-at", "2099-01-01T00:00", env=env).stdout)

    # The 550 is in the last line and the exit code: "finished, some not sent".
    done = mailout("worker", "--until-idle", env=env, expect=5).stdout
    assert done.strip().splitlines()[-1] == "idle: 1 sent, 1 failed"
    (received,) = smtp_server.messages
    assert received.message_id == ok["message_id"]
    assert received.rcpt_tos == ("buyer@example.com",)

    status = mailout_json("status", env=env)
    assert status["totals"]["sent"] == 1
    assert status["totals"]["failed"] == 1
    assert status["totals"]["pending"] == 1
    assert status["retrying"] == 0
    assert {q["queue"]: q["counts"]["failed"] for q in status["queues"]} == {"bulk": 1,
                                                                            "default": 0}
    assert status["last_sent_at"] is not None
    assert status["dead"] == 0

    shown = mailout("show", "order-7-confirmation", "--json", env=env).stdout
    assert "SECRET-BODY-TEXT" not in shown  # the body is never shown
    doc = json.loads(shown)
    assert doc["message"]["status"] == "sent"
    assert doc["message"]["attempts"] == 1
    assert [a["outcome"] for a in doc["attempts"]] == ["sent"]
    provider_id = doc["message"]["provider_message_id"]
    assert provider_id == "msg-1"

    for ref in ("order-7-confirmation", ok["message_id"].strip("<>"), provider_id):
        traced = mailout_json("trace", ref, env=env)
        assert traced["id"] == ok["id"]
        assert traced["message_id"] == ok["message_id"]
        assert traced["sent_at"]
        assert traced["first_attempt_at"]
        assert traced["created_at"]
    assert traced["matched_by"] == "provider_id"

    failed = mailout_json("list", "--status", "failed", env=env)
    assert [m["id"] for m in failed] == [bad["id"]]
    assert failed[0]["reason"]
    assert [m["id"] for m in mailout_json("list", "--queue", "bulk", "--since", "1h",
                                          env=env)] == [bad["id"]]

    out = mailout("cancel", str(later["id"]), str(ok["id"]), "999", env=env).stdout
    assert f"cancelled 1: {later['id']}" in out
    assert f"{ok['id']} (sent)" in out
    assert "999 (not found)" in out
    assert mailout("trace", "no-such-ref", env=env, expect=1).stderr.startswith("error: no mess")


@pytest.mark.slow
def test_retry_requeues_a_dead_message_and_it_is_sent(
    sqlite_url: str, smtp_server: SmtpTestServer
) -> None:
    env = worker_env(sqlite_url, smtp_server, MAILOUT_MAX_ATTEMPTS=1)
    msg = json.loads(mailout("enqueue", "--to", "rcpt-451-once@example.com", "--subject", "Hi",
                             "--text", "x", env=env).stdout)
    mailout("worker", "--until-idle", env=env, expect=5)  # one dies: exit 5
    assert mailout_json("show", str(msg["id"]), env=env)["message"]["status"] == "dead"

    refused = mailout("retry", "--status", "dead", env=env, expect=1)
    assert "--yes" in refused.stderr
    assert "1 dead" in refused.stderr
    assert f"requeued 1: {msg['id']}" in mailout("retry", str(msg["id"]), "42", env=env).stdout
    assert "idle: 1 sent" in mailout("worker", "--until-idle", env=env).stdout
    doc = mailout_json("show", msg["key"], env=env)
    assert doc["message"]["status"] == "sent"
    assert doc["message"]["attempts"] == 1
    assert [a["outcome"] for a in doc["attempts"]] == ["dead", "sent"]
    assert [m.message_id for m in smtp_server.messages] == [msg["message_id"]]


@pytest.mark.slow
def test_purge_respects_the_idempotency_window(sqlite_url: str) -> None:
    engine = db.make_engine(sqlite_url)
    with engine.begin() as conn:
        ids = [enqueue(conn, to=f"u{i}@example.com", subject="Hi", text="x", key=f"k{i}",
                       settings=EnqueueSettings()).id for i in range(3)]
        finished = {ids[0]: -2 * 86400.0, ids[1]: -40 * 86400.0}  # ids[2] stays pending
        for rid, offset in finished.items():
            conn.execute(update(messages).where(messages.c.id == rid).values(
                status="sent", finished_at=db_now_plus(_secs(offset))))
    engine.dispose()
    env = {"MAILOUT_DATABASE_URL": sqlite_url}

    refused = mailout("purge", "--older-than", "1d", env=env, expect=1)
    assert "idempotency" in refused.stderr
    assert "--force" in refused.stderr
    assert "purged 1 messages" in mailout("purge", "--older-than", "31d", "--yes",
                                          env=env).stdout
    assert "purged 1 messages" in mailout("purge", "--older-than", "1d", "--force", "--yes",
                                          env=env).stdout
    assert [m["id"] for m in mailout_json("list", env=env)] == [ids[2]]


def test_purge_deletes_in_transactions_of_batch_rows(sqlite_url: str) -> None:
    engine = db.make_engine(sqlite_url)
    with engine.begin() as conn:
        ids = [enqueue(conn, to=f"u{i}@example.com", subject="Hi", text="x", key=f"k{i}",
                       settings=EnqueueSettings()).id for i in range(5)]
        conn.execute(update(messages).where(messages.c.id.in_(ids)).values(
            status="sent", finished_at=db_now_plus(_secs(-40 * 86400.0))))
    engine.dispose()
    env = {"MAILOUT_DATABASE_URL": sqlite_url}

    out = mailout("purge", "--older-than", "31d", "--batch", "2", "--pause", "0.01", "--yes",
                  env=env).stdout
    assert "purged 5 messages" in out
    assert "3 transactions of up to 2 rows" in out
    assert mailout_json("list", env=env) == []


@pytest.mark.slow
def test_check_explains_failures_without_the_password(
    sqlite_url: str,
    smtp_server: SmtpTestServer,
    auth_smtp_server: SmtpTestServer,
    other_certs: TestCerts,
) -> None:
    ok = mailout("check", env=worker_env(sqlite_url, smtp_server))
    assert "ok     database" in ok.stdout
    assert "ok     SMTP" in ok.stdout

    refused = mailout("check", env=worker_env(sqlite_url, smtp_server,
                                              SMTP_PORT=free_port()), expect=1)
    assert "connection refused" in refused.stdout
    assert "SMTP_PORT" in refused.stdout

    bad_auth = worker_env(sqlite_url, auth_smtp_server, SMTP_USER=AUTH_USER,
                          SMTP_PASS=DISTINCTIVE_PASSWORD)
    failed = mailout("-vv", "check", env=bad_auth, expect=1)  # debug logs too
    assert "authentication failed" in failed.stdout
    assert "SMTP_PASS" in failed.stdout
    assert DISTINCTIVE_PASSWORD not in failed.stdout + failed.stderr

    untrusted = {**bad_auth, "SMTP_CA_FILE": str(other_certs.ca_file)}
    tls = mailout("check", env=untrusted, expect=1)
    assert "TLS failed" in tls.stdout
    assert "SMTP_CA_FILE" in tls.stdout
    assert DISTINCTIVE_PASSWORD not in tls.stdout + tls.stderr


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["list", "--since", "yesterday"], "--since"),
        (["purge", "--older-than", "30"], "not a duration"),
        (["purge", "--older-than", "31d", "--pause", "5m"], "longer than 60 seconds"),
        (["purge", "--older-than", "31d", "--batch", "0"], "--batch"),
        (["enqueue", "--to", "not-an-address", "--subject", "s", "--text", "t"], "--to"),
        (["retry"], "give message ids or --status"),
    ],
)
def test_bad_arguments_exit_2_with_a_helpful_message(
    sqlite_url: str, args: list[str], complaint: str
) -> None:
    proc = mailout(*args, env={"MAILOUT_DATABASE_URL": sqlite_url}, expect=2)
    assert complaint in proc.stderr


@pytest.mark.slow
def test_status_list_cancel_on_the_servers(server_url: str) -> None:
    env = {"MAILOUT_DATABASE_URL": server_url}
    msg = json.loads(mailout("enqueue", "--to", "a@example.com", "--subject", "Hi", "--text",
                             "x", "--queue", "pg", "--priority", "5", env=env).stdout)
    assert f"cancelled 1: {msg['id']}" in mailout("cancel", str(msg["id"]), env=env).stdout
    status = mailout_json("status", env=env)
    assert status["totals"]["cancelled"] == 1
    assert status["queues"][0]["queue"] == "pg"
    listed = mailout_json("list", "--status", "cancelled,pending", "--since", "2000-01-01",
                          env=env)
    assert [(m["id"], m["priority"]) for m in listed] == [(msg["id"], 5)]


@pytest.mark.slow
def test_example_app_commits_order_and_email_together(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    proc = subprocess.run([sys.executable, str(EXAMPLES / "order_app.py"), "--db", url],
                          capture_output=True, text=True, timeout=60, env=clean_env(),
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert "rolled back" in proc.stdout
    assert "outbox: 1 pending" in proc.stdout
    listed = mailout_json("list", env={"MAILOUT_DATABASE_URL": url})
    assert [m["key"] for m in listed] == ["order-1-confirmation"]


def test_example_templates_match_the_demo_templates() -> None:
    packaged = Path(__file__).resolve().parents[3] / "src" / "mailout" / "cli" / "demo_templates"
    files = sorted(p.relative_to(packaged) for p in packaged.rglob("*") if p.is_file())
    assert files
    assert files == sorted(p.relative_to(EXAMPLES / "templates")
                                     for p in (EXAMPLES / "templates").rglob("*") if p.is_file())
    for rel in files:
        assert (packaged / rel).read_text() == (EXAMPLES / "templates" / rel).read_text()



def test_operator_sql_on_both_backends(engine: Engine) -> None:
    """The queries behind retry and purge, in-process on SQLite and PostgreSQL (the
    subprocess tests above cover them on SQLite only)."""
    with engine.begin() as conn:
        dead, pending, old = (enqueue(conn, to=f"u{i}@example.com", subject="Hi", text="x",
                                      key=f"k{i}", settings=EnqueueSettings()).id
                              for i in range(3))
        conn.execute(update(messages).where(messages.c.id == dead).values(
            status="dead", reason="max_age", attempts=8, finished_at=db_now_plus(_secs(-5)),
            expires_at=db_now_plus(_secs(-1))))
        conn.execute(update(messages).where(messages.c.id == old).values(
            status="sent", provider_message_id="PROV-1", sent_at=db_now_plus(_secs(-40 * 86400)),
            finished_at=db_now_plus(_secs(-40 * 86400))))
    with engine.begin() as conn:
        change = operator.requeue(conn, [dead, pending, 999])
        assert operator.retryable_ids(conn, "dead") == []
    assert change.changed == [dead]
    assert change.skipped == {pending: "pending", 999: "not found"}
    with engine.connect() as conn:
        by_provider = operator.find(conn, "PROV-1")
        by_id = operator.find(conn, str(dead))
        report = operator.status(conn)
    assert by_provider is not None
    assert by_provider[0].id == old
    assert by_id is not None
    row = by_id[0]
    assert (row.status, row.attempts, row.reason, row.finished_at) == ("pending", 0, None, None)
    assert row.expires_at is not None
    assert row.created_at is not None
    assert row.expires_at > row.created_at  # a fresh age window, or it would die at once
    assert report.totals["pending"] == 2
    assert report.queues[0].due == 2
    assert report.queues[0].oldest_due_age_seconds is not None
    assert report.queues[0].due_lag_seconds is not None
    assert report.last_sent_at is not None
    with engine.begin() as conn:
        assert purging.count_purgeable(conn, timedelta(days=30), ["sent", "dead"]) == 1
        assert purging.purge(conn, timedelta(days=30), ["sent"], batch=1) == (1, 0, old)
        assert purging.purge(conn, timedelta(days=30), ["sent"], batch=1) == (0, 0, None)


def _secs(seconds: float) -> Any:
    return bindparam("secs", seconds, Float)
