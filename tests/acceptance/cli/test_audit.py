"""Every CLI action is in the audit log, which `mailout audit` and `mailout show` print."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import update

from mailout import db
from mailout.db.schema import messages
from tests.acceptance.cli.test_main import mailout, mailout_json

pytestmark = pytest.mark.slow  # the mailout executable, run many times over


def test_cli_actions_are_audited_and_shown(tmp_path: Path) -> None:
    sqlite_url = f"sqlite:///{tmp_path / 'outbox.db'}"
    mailout("db", "upgrade", env={"MAILOUT_DATABASE_URL": sqlite_url})
    env = {"MAILOUT_DATABASE_URL": sqlite_url, "MAILOUT_ACTOR": "ops-alice"}
    out = mailout("enqueue", "--to", "a@example.com", "--subject", "s", "--text", "t",
                  "--key", "k-1", env=env).stdout
    rid = int(json.loads(out)["id"])
    mailout("enqueue", "--to", "b@example.com", "--subject", "s", "--text", "t", "--key", "k-2",
            env=env)
    engine = db.make_engine(sqlite_url)
    with engine.begin() as conn:
        conn.execute(update(messages).where(messages.c.id == rid).values(status="dead"))
    engine.dispose()
    mailout("retry", str(rid), "--reason", "relay fixed [bold]now[/]", env=env)
    mailout("cancel", str(rid + 1), "--reason", "duplicate order", env=env)
    mailout("pause", "--queue", "bulk", "--reason", "campaign on hold", env=env)
    mailout("resume", "--queue", "bulk", env=env)

    entries = mailout_json("audit", env=env)
    assert [e["action"] for e in entries] == ["resume", "pause", "cancel", "retry"]
    assert {e["actor"] for e in entries} == {"ops-alice (cli)"}
    retry = entries[-1]
    assert retry["reason"] == "relay fixed [bold]now[/]"
    assert retry["target"] == f"message {rid}"
    assert retry["changed"] == 1

    shown = mailout_json("show", str(rid), env=env)
    assert [e["action"] for e in shown["audit"]] == ["retry"]
    table = mailout("show", str(rid), env={**env, "COLUMNS": "200"}).stdout
    assert "Operator actions" in table
    assert "ops-alice (cli)" in table
    assert "relay fixed [bold]now[/]" in table  # printed as text, never as Rich markup
    assert "ops-alice (cli)" in mailout("audit", env={**env, "COLUMNS": "200"}).stdout
