"""Enqueue refuses a template it cannot find, also with MAILOUT_TEMPLATES unset and no
./templates folder, and writes nothing; MAILOUT_TEMPLATES_CHECK=off is the way out for
an app that enqueues where the templates are not (issue 33, item 17)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from mailout import MailoutError, TemplateNotFound, db
from mailout.db.schema import messages
from mailout.exceptions import InvalidMessage
from mailout.outbox import ENV_NAMES, Message, enqueue, enqueue_many
from tests.acceptance.cli.test_main import MAILOUT, clean_env

PARAMS = {"name": "Ann"}


@pytest.fixture
def no_templates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory without ./templates, and no template setting: the newcomer's
    case. Returns where the worker would look."""
    monkeypatch.chdir(tmp_path)
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MAIL_FROM", "Shop <shop@example.com>")
    return tmp_path / "templates"


def _count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(messages)).scalar_one())


def test_an_unknown_template_is_refused_naming_it_and_the_folder(
    engine: Engine, no_templates: Path,
) -> None:
    with pytest.raises(TemplateNotFound) as caught, engine.begin() as conn:
        enqueue(conn, to="ann@example.com", template="welcome", params=PARAMS)
    error = caught.value
    assert isinstance(error, InvalidMessage)
    assert isinstance(error, MailoutError)
    assert isinstance(error, ValueError)
    assert (error.field, error.template, error.folder) == ("template", "welcome",
                                                           str(no_templates))
    assert f"no template 'welcome' in {no_templates}, a folder that does not exist" in str(error)
    assert "MAILOUT_TEMPLATES_CHECK=off" in str(error)
    with pytest.raises(TemplateNotFound), engine.begin() as conn:
        enqueue_many(conn, [Message(to="a@example.com", subject="Hi", text="Hi"),
                            Message(to="b@example.com", template="welcome", params=PARAMS)])
    assert _count(engine) == 0


def test_a_template_missing_from_an_existing_folder_is_refused_too(
    engine: Engine, no_templates: Path,
) -> None:
    (no_templates / "receipt").mkdir(parents=True)
    (no_templates / "receipt" / "subject.txt").write_text("Receipt")
    (no_templates / "receipt" / "text.txt").write_text("Thanks")
    with pytest.raises(TemplateNotFound, match=r"no template 'welcome' in \S+ \("), \
            engine.begin() as conn:
        enqueue(conn, to="ann@example.com", template="welcome", params=PARAMS)
    with engine.begin() as conn:
        enqueue(conn, to="ann@example.com", template="receipt")
    assert _count(engine) == 1


def test_templates_check_off_enqueues_for_a_worker_elsewhere(
    engine: Engine, no_templates: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MAILOUT_TEMPLATES_CHECK", "off")
    with engine.begin() as conn:
        result = enqueue(conn, to="ann@example.com", template="welcome", params=PARAMS)
    assert result.created
    assert _count(engine) == 1


def test_the_cli_refuses_it_in_one_line_and_writes_nothing(
    sqlite_url: str, tmp_path: Path,
) -> None:
    env = clean_env({"MAILOUT_DATABASE_URL": sqlite_url,
                     "MAIL_FROM": "Shop <shop@example.com>"})
    proc = subprocess.run([MAILOUT, "enqueue", "--to", "ann@example.com", "--template",
                           "welcome", "--params", '{"name": "Ann"}'], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    [error] = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert "--template" in error
    assert f"no template 'welcome' in {tmp_path / 'templates'}, a folder that does not " \
        "exist" in error
    engine = db.make_engine(sqlite_url)
    try:
        assert _count(engine) == 0
    finally:
        engine.dispose()
