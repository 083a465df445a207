"""Who the CLI acts as, for the audit log, and the ``mailout audit`` command."""

from __future__ import annotations

import getpass
import os
from typing import Any

import click

from mailout.cli import display
from mailout.db import audit

ACTOR_ENV = "MAILOUT_ACTOR"
REASON_HELP = "Why, for the audit log (`mailout audit`, the console, `mailout show`)."


def actor() -> str:
    """``MAILOUT_ACTOR``, else the login name, marked as coming from the CLI."""
    name = os.environ.get(ACTOR_ENV, "").strip()
    if not name:
        try:
            name = getpass.getuser()
        except (OSError, KeyError):  # no login name in a bare container
            name = "unknown"
    return f"{name} (cli)"


@click.command("audit")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def audit_cmd(obj: dict[str, Any], limit: int, as_json: bool) -> None:
    """The newest operator actions: who did what, when and why.

    Every retry, cancel, resolve, pause, resume and purge is logged, from the CLI
    and from the web console alike.
    """
    from mailout.cli import common

    with common.engine_for(obj).connect() as conn:
        rows = audit.entries(conn, limit=limit)
    if as_json:
        click.echo(display.to_json(rows))
        return
    out = display.console()
    if not rows:
        out.print("no operator actions logged")
        return
    out.print(display.audit_table(rows, title="Audit log (newest first)"))
