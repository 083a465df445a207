"""``mailout bounces`` and ``mailout suppress`` as a user runs them: a subprocess on a
real database (SQLite file and PostgreSQL)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import update

from mailout import db
from mailout.db.schema import messages
from mailout.outbox import EnqueueSettings, enqueue
from tests.acceptance.cli.test_main import MAILOUT, clean_env, mailout

pytestmark = pytest.mark.slow  # the mailout executable, run many times over

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "dsn"


def _row(url: str, to: str, message_id: str) -> int:
    engine = db.make_engine(url)
    with engine.begin() as conn:
        rid = enqueue(conn, to=to, subject="Hi", text="Hello",
                      settings=EnqueueSettings(message_id_domain="shop.example")).id
        conn.execute(update(messages).where(messages.c.id == rid).values(
            message_id=message_id, status="sent"))
    engine.dispose()
    return rid


def test_ingest_files_and_stdin_then_manage_the_list(db_url: str, tmp_path: Path) -> None:
    rid = _row(db_url, "nobody@gmail.example", "<c0ffee00c0ffee00c0ffee00c0ffee41@shop.example>")
    env = {"MAILOUT_DATABASE_URL": db_url, "MAILOUT_RETURN_PATH": "bounces+{id}@shop.example",
           "MAILOUT_RETURN_PATH_SECRET": "return-path-secret-0123"}
    files = [str(CORPUS / n) for n in ("postfix_hard.eml", "multi_recipient.eml",
                                       "arf_yahoo.eml")]
    out = json.loads(mailout("bounces", "ingest", *files, "--json", env=env).stdout)
    assert (out["events"], out["stored"], out["matched"], out["unverified"]) == (6, 6, 1, 5)
    # Only the report about our own message acts; the others name messages we never
    # sent (anyone can mail us such reports) and are kept unverified.
    assert out["suppressed"] == ["nobody@gmail.example"]
    # stdin, as a Postfix pipe feeds it: the same report again is stored once
    proc = subprocess.run([MAILOUT, "bounces", "ingest", "-", "--json"], env=clean_env(env),
                          input=(CORPUS / "postfix_hard.eml").read_bytes(),
                          capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["duplicates"] == 1
    # a malformed report stops the batch and nothing is stored
    bad = mailout("bounces", "ingest", str(CORPUS / "exim_hard.eml"),
                  str(CORPUS / "not_a_bounce.eml"), env=env, expect=1)
    assert "not_a_bounce.eml" in bad.stderr
    assert "nothing was stored" in bad.stderr
    skip = json.loads(mailout("bounces", "ingest", "--skip-invalid", "--json",
                              str(CORPUS / "exim_hard.eml"),
                              str(CORPUS / "not_a_bounce.eml"), env=env).stdout)
    assert (skip["stored"], len(skip["skipped"])) == (1, 1)

    [report] = json.loads(mailout("report", "--json", env=env).stdout)
    assert (report["sent"], report["bounced"], report["bounce_rate"]) == (1, 1, 1.0)
    assert (report["complained"], report["complaint_rate"]) == (0, 0.0)
    assert "1 (100.0%)" in mailout("report", env=env).stdout
    check = json.loads(mailout("suppress", "check", "Nobody@Gmail.example", "--json",
                               env=env).stdout)
    assert check["suppressed"] is True
    assert check["entry"]["reason"] == "hard_bounce"
    listed = json.loads(mailout("suppress", "list", "--json", env=env).stdout)
    assert {s["address"] for s in listed} == {"nobody@gmail.example"}
    mailout("suppress", "remove", "nobody@gmail.example", env=env, expect=2)  # --reason needed
    removed = mailout("suppress", "remove", "nobody@gmail.example", "--reason",
                      "customer fixed the mailbox, ticket 77", "--by", "ops@shop", env=env)
    assert "removed (was hard_bounce" in removed.stdout
    history = json.loads(mailout("suppress", "history", "nobody@gmail.example", "--json",
                                 env=env).stdout)
    assert [(h["action"], h["actor"]) for h in history] == [
        ("added", "ingest:dsn"), ("removed", "ops@shop")]
    assert history[1]["note"] == "customer fixed the mailbox, ticket 77"
    assert "not suppressed" in mailout("suppress", "check", "nobody@gmail.example",
                                       env=env).stdout
    mailout("suppress", "add", "x@example.com", "--note", "asked by phone", env=env)
    assert "already" in mailout("suppress", "add", "x@example.com", env=env).stdout
    mailout("suppress", "add", "not an address", env=env, expect=2)
    events = json.loads(mailout("bounces", "events", "--json", env=env).stdout)
    linked = [e for e in events["events"] if e["outbox_id"] == rid]
    assert [e["matched_by"] for e in linked] == ["message_id"]
    unmatched = json.loads(mailout("bounces", "events", "--unmatched", "--json",
                                   env=env).stdout)["events"]
    assert all(e["outbox_id"] is None for e in unmatched)
    assert len(unmatched) == 6
    table = mailout("bounces", "events", env=env).stdout
    assert "unverified" in table
    reasons = {e["recipient"]: e["reason"] for e in events["events"]}
    assert reasons["gone@one.example"] == "mailbox_unknown"  # stored with each bounce
    assert reasons["blocked@two.example"] == "spam_block"


def test_markup_and_control_characters_in_data_are_shown_inert(sqlite_url: str) -> None:
    env = {"MAILOUT_DATABASE_URL": sqlite_url}
    mailout("suppress", "add", "evil@example.com", "--note", "[bold red]x[/]\x1b[31m", env=env)
    out = mailout("suppress", "list", env=env).stdout
    assert "[bold red]x[/]" in out
    assert "\x1b" not in out


def test_an_mbox_of_reports_is_read_whole(sqlite_url: str, tmp_path: Path) -> None:
    import mailbox

    _row(sqlite_url, "typo.name@gmial.example", "<c0ffee00c0ffee00c0ffee00c0ffee44@shop.example>")
    _row(sqlite_url, "reader@hotmail.example", "<c0ffee00c0ffee00c0ffee00c0ffee48@shop.example>")
    box = mailbox.mbox(str(tmp_path / "bounces.mbox"))
    for name in ("postfix_soft.eml", "gmail_hard.eml", "arf_microsoft_redacted.eml"):
        box.add((CORPUS / name).read_bytes())
    box.flush()
    box.close()
    out = json.loads(mailout("bounces", "ingest", "--mbox", "--json",
                             str(tmp_path / "bounces.mbox"),
                             env={"MAILOUT_DATABASE_URL": sqlite_url}).stdout)
    assert (out["events"], out["stored"], out["unmatched"]) == (3, 3, 1)
    # The redacted complaint acts on the linked message's recipient, never on the
    # placeholder its enclosed To: shows.
    assert sorted(out["suppressed"]) == ["reader@hotmail.example", "typo.name@gmial.example"]


def test_bad_inputs_give_one_line_errors_and_skip_invalid_counts_each(
        sqlite_url: str, tmp_path: Path) -> None:
    env = {"MAILOUT_DATABASE_URL": sqlite_url}
    for args in (("--mbox", str(tmp_path / "nonexistent")), (str(tmp_path / "nonexistent"),)):
        proc = mailout("bounces", "ingest", *args, env=env, expect=2)
        assert "Traceback" not in proc.stderr
        assert "no such file" in proc.stderr
    deep = b"From: x@example.com\n" + b"".join(
        f'Content-Type: multipart/mixed; boundary="b{i}"\n\n--b{i}\n'.encode()
        for i in range(3000))
    (tmp_path / "deep.eml").write_bytes(deep)
    (tmp_path / "nul.eml").write_bytes((CORPUS / "postfix_hard.eml").read_bytes().replace(
        b"nobody@gmail.example", b"nob\x00ody@gmail.example"))
    names = [str(tmp_path / "deep.eml"), str(CORPUS / "not_a_bounce.eml"),
             str(tmp_path / "nul.eml"), str(CORPUS / "gmail_hard.eml")]
    refused = mailout("bounces", "ingest", *names, env=env, expect=1)
    assert "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    out = json.loads(mailout("bounces", "ingest", "--skip-invalid", "--json", *names,
                             env=env).stdout)
    assert len(out["skipped"]) == 2  # the nested one and the auto-reply, each named
    assert out["stored"] == 2  # the NUL report is stored (without its junk recipient)
