"""The README's Django section, run as a newcomer runs it: its shell blocks pasted into
bash in an empty folder, its settings lines added to the new project's settings.py,
ending with the message in the local sink's folder. Its production settings are
read the way the worker reads them.
"""

from __future__ import annotations

from email import message_from_bytes, policy
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.conf import global_settings

from mailout.contrib.django.mail_settings import worker_environment
from tests.support.shell_blocks import REPO, Block, blocks, free_port, run_blocks

# Lines a test leaves out: its own virtualenv, with mailout installed, is on PATH.
INSTALL = ("python3 -m venv .venv && . .venv/bin/activate", "pip install 'mailout[django]'")
PORT_IN_README = "EMAIL_PORT = 2525"
SINK_IN_README = "mailout dev-sink --background"


def django_blocks() -> list[Block]:
    """Each code block of the README's Django section, in order."""
    return blocks(REPO / "README.md", "Django")


@pytest.mark.slow
def test_the_django_section_pasted_into_a_shell_delivers_its_message(tmp_path: Path) -> None:
    setup, settings, run = django_blocks()[:3]
    assert (setup.lang, settings.lang, run.lang) == ("sh", "python", "sh")
    # The only changes to the text: another run on this machine may hold port 2525,
    # and the settings lines go into the new project's settings.py.
    port = free_port()
    assert all(line in setup.text for line in INSTALL)
    assert PORT_IN_README in settings.text
    assert SINK_IN_README in run.text
    append = Block(settings.path, settings.line, "sh", "cat >> mysite/settings.py <<'SETTINGS'\n"
                   f"{settings.text.replace(PORT_IN_README, f'EMAIL_PORT = {port}')}SETTINGS\n",
                   runnable=False)
    replace = {**dict.fromkeys(INSTALL, ""),
               SINK_IN_README: f"{SINK_IN_README} --port {port}"}
    *_, done = run_blocks([setup, append, run], tmp_path, replace=replace, timeout=300)
    out = done.stdout + done.stderr
    assert "idle: 1 sent" in done.stdout, out
    received = message_from_bytes((tmp_path / "mysite" / "sink-mail" / "1.eml").read_bytes(),
                                  policy=policy.default)
    assert received["From"] == "Shop <shop@example.com>"
    assert received["Subject"] == "Welcome"


def test_the_production_settings_reach_the_worker_as_the_table_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABASE_PASSWORD", "db-pw")
    monkeypatch.setenv("EMAIL_HOST_PASSWORD", "smtp-pw")
    production, mailers = (b.text for b in django_blocks()[3:] if "EMAIL" in b.text)
    project = {k: getattr(global_settings, k) for k in dir(global_settings) if k.isupper()}
    exec(production, project)  # the README's own block, run as Django runs settings
    found = worker_environment(SimpleNamespace(**project), {}, has_mailers=False)
    assert found == {"MAIL_FROM": "Shop <noreply@shop.example.com>",
                     "SMTP_HOST": "smtp.provider.example", "SMTP_PORT": "587",
                     "SMTP_TLS": "starttls", "SMTP_USER": "shop", "SMTP_PASS": "smtp-pw",
                     "SMTP_TIMEOUT": "30"}
    six_one = {"DEFAULT_FROM_EMAIL": "Shop <shop@example.com>"}
    exec("import os\n" + mailers, six_one)  # the README's block (it uses os.environ)
    found = worker_environment(SimpleNamespace(**six_one), {}, has_mailers=True)
    assert (found["SMTP_HOST"], found["SMTP_PORT"], found["SMTP_TLS"]) == (
        "smtp.provider.example", "587", "starttls")
