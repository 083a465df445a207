"""What a newcomer types, run as subprocesses (issue 14, items 11, 12, 15 and 16).

Database URLs pasted from an app, out-of-range input, missing files, special-use
domains: each ends in a one-line message and the documented exit code (1 an error,
2 bad usage), never a traceback, and nothing is created by a read-only command.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import worker_env

from tests.acceptance.cli.test_main import MAILOUT, clean_env, mailout


def _one_line_error(proc: subprocess.CompletedProcess[str], code: int) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    return proc.stderr


@pytest.mark.slow
def test_postgres_url_spellings_from_apps_all_work(pg_url: str) -> None:
    rest = pg_url.split("://", 1)[1]
    for scheme in ("postgresql+asyncpg", "postgresql+psycopg2", "postgres", "postgresql"):
        out = mailout("--db", f"{scheme}://{rest}", "status", "--json").stdout
        assert "totals" in json.loads(out)


@pytest.mark.slow
def test_unknown_or_driverless_urls_are_one_line_errors(tmp_path: Path) -> None:
    for url in ("foo://bar", "mysql://root@127.0.0.1:1/none", "not a url"):
        said = _one_line_error(mailout("--db", url, "status", expect=None), 1)
        assert said.startswith("error: MAILOUT_DATABASE_URL:") or "database error" in said
        assert len(said.strip().splitlines()) == 1, said


def test_an_empty_db_option_is_a_usage_error() -> None:
    said = _one_line_error(mailout("--db", "", "status", expect=None), 2)
    assert "--db" in said


@pytest.mark.slow
def test_read_only_commands_do_not_create_a_missing_sqlite_file(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    for command in (["status"], ["list"], ["show", "1"]):
        said = _one_line_error(mailout("--db", f"sqlite:///{missing}", *command, expect=None), 1)
        assert "does not exist" in said
    assert not missing.exists()


@pytest.mark.slow
def test_out_of_range_input_is_a_usage_error(sqlite_url: str) -> None:
    env = {"MAILOUT_DATABASE_URL": sqlite_url}
    cases = [
        ["list", "--since", "99999999999d"],
        ["purge", "--older-than", "99999999999999d", "--yes"],
        ["enqueue", "--to", "a@example.com", "--subject", "s", "--text", "t",
         "--send-at", "9999-12-31T23:59:59-12:00"],
        ["show", "²"],
        ["trace", "²"],
        ["retry", "99999999999999999999999"],
        ["cancel", "99999999999999999999999"],
        ["list", "--limit", "99999999999999999999999"],
    ]
    for args in cases:
        _one_line_error(mailout(*args, env=env, expect=None), 2)
    # A huge number is still a valid key to look up: not found, not a crash.
    _one_line_error(mailout("show", "99999999999999999999999", env=env, expect=None), 1)


def test_db_upgrade_says_whether_it_applied_anything(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    first = mailout("--db", url, "db", "upgrade").stdout
    again = mailout("--db", url, "db", "upgrade").stdout
    assert first.startswith("migrated from an empty database to revision")
    assert again.startswith("database already at revision")


def test_enqueue_help_explains_every_content_option() -> None:
    out = mailout("enqueue", "--help").stdout
    for option in ("--subject", "--text", "--html", "--queue"):
        line = next(x for x in out.splitlines() if x.strip().startswith(option))
        assert len(line.split(option, 1)[1].split()) > 1, line  # more than a metavar


def test_list_shows_when_a_pending_message_is_due(sqlite_url: str) -> None:
    env = {"MAILOUT_DATABASE_URL": sqlite_url}
    mailout("enqueue", "--to", "a@example.com", "--subject", "s", "--text", "t",
            "--send-at", "2030-01-02T03:04:05", env=env)
    out = mailout("list", env=env).stdout
    assert "due (UTC)" in out
    assert "01-02 03:04:05" in out


@pytest.mark.slow
def test_the_demos_next_commands_run_without_the_venv_on_path(tmp_path: Path) -> None:
    env = clean_env({"PATH": "/usr/bin:/bin"})
    subprocess.run([MAILOUT, "demo", "--dir", "demo"], cwd=tmp_path, env=env, check=True,
                   capture_output=True, text=True, timeout=120)
    out = subprocess.run([MAILOUT, "demo", "--dir", "demo"], cwd=tmp_path, env=env,
                         check=True, capture_output=True, text=True, timeout=120).stdout
    commands = [line.strip() for line in out.split("What to run next:", 1)[1].splitlines()
                if line.strip()]
    assert commands
    for command in commands[:2]:  # status and list
        done = subprocess.run(["sh", "-c", command], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, (command, done.stderr)


def test_the_example_apps_database_is_ignored_by_git() -> None:
    ignored = (Path(__file__).resolve().parents[3] / ".gitignore").read_text()
    for name in ("example-shop.db", "quickstart.db", "sink-mail/"):
        assert re.search(rf"^{re.escape(name)}", ignored, re.M), name


@pytest.mark.slow
def test_special_use_domains_need_the_setting_and_then_work(
    sqlite_url: str, smtp_server: SmtpTestServer,
) -> None:
    env = {"MAILOUT_DATABASE_URL": sqlite_url}
    said = _one_line_error(mailout("enqueue", "--to", "ana@shop.test", "--subject", "s",
                                   "--text", "t", env=env, expect=None), 2)
    assert "MAILOUT_ALLOW_SPECIAL_DOMAINS" in said
    allowed = {**env, "MAILOUT_ALLOW_SPECIAL_DOMAINS": "test,localhost"}
    mailout("enqueue", "--to", "ana@shop.test", "--subject", "s", "--text", "t", env=allowed)
    worker = worker_env(sqlite_url, smtp_server, MAIL_FROM="Shop <noreply@shop.test>",
                        MAILOUT_ALLOW_SPECIAL_DOMAINS="test")
    assert "idle: 1 sent" in mailout("worker", "--until-idle", env=worker).stdout
    assert smtp_server.messages[0].rcpt_tos == ("ana@shop.test",)
    bad = {**env, "MAILOUT_ALLOW_SPECIAL_DOMAINS": "com"}
    _one_line_error(mailout("worker", "--until-idle", env={**worker, **bad}, expect=None), 1)


def test_check_prints_one_line_per_check(sqlite_url: str, smtp_server: SmtpTestServer) -> None:
    env = worker_env(sqlite_url, smtp_server, SMTP_EHLO="mail.shop.example.com")
    out = mailout("check", env=env).stdout
    lines = out.strip().splitlines()
    assert len(lines) == 2, out  # the database and SMTP, each on one line
    assert lines[1].startswith("ok     SMTP"), out


@pytest.mark.parametrize("how", ["variable", "url"])
def test_check_warns_when_the_ehlo_name_is_not_a_fully_qualified_one(
        sqlite_url: str, smtp_server: SmtpTestServer, how: str) -> None:
    env = worker_env(sqlite_url, smtp_server)
    if how == "variable":
        env["SMTP_EHLO"] = "localhost"
    else:
        env["MAILOUT_TRANSPORT"] = (f"failover(smtp://{smtp_server.host}:{smtp_server.port}"
                                    "?tls=none&ehlo=localhost, memory://)")
    out = mailout("check", env=env).stdout  # a warning: the exit status stays 0
    warnings = [line for line in out.splitlines() if line.startswith("WARN")]
    member = "smtp: " if how == "url" else ""
    assert warnings == [f"WARN   {member}the EHLO name 'localhost' is not a fully qualified "
                        "domain name; relays may penalise or refuse it: set SMTP_EHLO (or "
                        "?ehlo= on the smtp:// URL) to this host's public name"], out
    assert smtp_server.ehlo_names == ["localhost"]  # the name the check gave


@pytest.mark.parametrize("command", [["check"], ["worker", "--until-idle"]])
def test_an_http_transport_without_the_http_extra_is_a_one_line_install_hint(
    tmp_path: Path, command: list[str]
) -> None:
    # httpx made unimportable for the real command, as in an install without mailout[http].
    hidden = tmp_path / "hidden" / "httpx"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'httpx'\", name='httpx')\n")
    env = {"PYTHONPATH": str(hidden.parent), "MAIL_FROM": "shop@example.com",
           "MAILOUT_DATABASE_URL": f"sqlite:///{tmp_path / 'outbox.db'}",
           "MAILOUT_TRANSPORT": "resend://re_secret_key"}
    proc = mailout(*command, env=env, expect=None)
    said = _one_line_error(proc, 1)
    assert "pip install 'mailout[http]'" in said
    assert len(said.strip().splitlines()) == 1, said
    assert "re_secret_key" not in said
