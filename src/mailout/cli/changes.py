"""The commands that change rows an operator reviewed: retry, cancel and purge.

Each asks before a change to many rows (``--yes`` when not at a terminal) and is
written to the audit log with who ran it and ``--reason``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import click

from mailout import db
from mailout.cli import audit as cli_audit
from mailout.cli import common, display
from mailout.cli.audit import REASON_HELP
from mailout.cli.common import DEFAULT_WINDOW, PURGE_BATCH, ROW_ID, WINDOW_ENV
from mailout.db import actions, operator, purging
from mailout.exceptions import ConfigError


def _confirm(question: str, yes: bool) -> None:
    """Ask ``question`` unless --yes; without a terminal to ask on, refuse (exit 1)."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise click.ClickException(f"{question} Not asking without a terminal: pass --yes.")
    if not click.confirm(question, default=False):
        raise click.ClickException("not confirmed: nothing changed")


def _report(change: operator.Change, verb: str) -> None:
    ids = ", ".join(map(str, change.changed)) or "none"
    click.echo(f"{verb} {len(change.changed)}: {ids}")
    if change.skipped:
        why = ", ".join(f"{i} ({st})" for i, st in change.skipped.items())
        click.echo(f"skipped {len(change.skipped)}: {why}")


@click.command("retry")
@click.argument("ids", nargs=-1, type=ROW_ID)
@click.option("--status", type=click.Choice(["dead", "failed", "unknown"]),
              help="Requeue every message in this status (after review!).")
@click.option("--queue", help="With --status: only this queue.")
@click.option("--template", help="With --status: only this template.")
@click.option("--reason", help=REASON_HELP)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def retry_cmd(obj: dict[str, Any], ids: tuple[int, ...], status: str | None,
              queue: str | None, template: str | None, reason: str | None, yes: bool) -> None:
    """Requeue reviewed failed messages.

    Dead, failed, unknown and cancelled rows become pending with 0 attempts, due now;
    their Message-ID and key stay the same. Give ids, or --status with optional
    --queue/--template (asks for confirmation; pass --yes when not at a terminal).
    """
    if bool(ids) == bool(status):
        raise click.UsageError("give message ids or --status, not both and not neither")
    if ids and (queue or template):
        raise click.UsageError("--queue and --template filter --status, not ids")
    engine = common.engine_for(obj)
    target = None
    if status:
        with engine.connect() as conn:
            ids = tuple(operator.retryable_ids(conn, status, queue=queue, template=template))
        if not ids:
            click.echo(f"no {status} messages match")
            return
        _confirm(f"Requeue {len(ids)} {status} messages?", yes)
        target = " ".join(f"{k}={v}" for k, v in
                          (("status", status), ("queue", queue), ("template", template)) if v)
    with db.immediate(engine) as conn:  # reads, then writes: see db.immediate
        change = actions.retry(conn, ids, actor=cli_audit.actor(), reason=reason, target=target)
    _report(change, "requeued")


@click.command("cancel")
@click.argument("ids", nargs=-1, type=ROW_ID, required=True)
@click.option("--reason", help=REASON_HELP)
@click.pass_obj
def cancel_cmd(obj: dict[str, Any], ids: tuple[int, ...], reason: str | None) -> None:
    """Cancel pending messages.

    Pending rows become cancelled (reason "operator"); rows in any other status are
    reported and left alone.
    """
    with db.immediate(common.engine_for(obj)) as conn:
        change = actions.cancel(conn, ids, actor=cli_audit.actor(), reason=reason)
    _report(change, "cancelled")


def idempotency_window() -> timedelta:
    """MAILOUT_IDEMPOTENCY_WINDOW (default 30d): how long keys must stay to deduplicate."""
    raw = os.environ.get(WINDOW_ENV) or DEFAULT_WINDOW
    try:
        return common.parse_span(raw)
    except ValueError as exc:
        raise ConfigError(WINDOW_ENV, str(exc)) from None


@click.command("purge")
@click.option("--older-than", required=True, callback=common.span_option, metavar="DURATION",
              help="Delete rows finished longer ago than this (30d, 12h...).")
@click.option("--status", "statuses", default=",".join(common.FINAL_STATUSES), show_default=True,
              help="Comma-separated final statuses to delete.")
@click.option("--force", is_flag=True, help="Allow a cutoff inside the idempotency window.")
@click.option("--batch", type=PURGE_BATCH, default=purging.DEFAULT_BATCH, show_default=True,
              help="Rows deleted per transaction.")
@click.option("--pause", callback=common.pause_option, metavar="SECONDS",
              default=str(purging.DEFAULT_PAUSE), show_default=True,
              help="Pause between transactions (0.25, 1s...), or as long as the last one "
                   "took if longer; 0 runs flat out.")
@click.option("--reason", help=REASON_HELP)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def purge_cmd(obj: dict[str, Any], older_than: timedelta, statuses: str, force: bool,
              batch: int, pause: float, reason: str | None, yes: bool) -> None:
    """Delete old finished messages.

    Deletes rows in the given final statuses finished before the cutoff (database
    clock), with their attempts, in transactions of --batch rows with a --pause
    between them so that workers keep their share of the database, then the
    attachment contents no message refers to any more. A cutoff inside the
    idempotency window (MAILOUT_IDEMPOTENCY_WINDOW, default 30d) needs --force.
    """
    chosen = common.choose_statuses(statuses, "--status", allowed=purging.PURGEABLE)
    window = idempotency_window()
    if older_than < window and not force:
        raise click.ClickException(
            f"refusing to purge: --older-than {display.age(older_than.total_seconds())} is "
            f"inside the idempotency window ({WINDOW_ENV}, "
            f"{display.age(window.total_seconds())}). A purged row takes its idempotency key "
            "with it, so the same event could be enqueued, and sent, again. Pass --force if "
            "that is acceptable."
        )
    from mailout.db import attachments

    engine = common.engine_for(obj)
    with engine.connect() as conn:
        n = purging.count_purgeable(conn, older_than, chosen)
        orphans = attachments.count_orphans(conn)
    if n == 0 and orphans == 0:
        click.echo("nothing to purge")
        return
    _confirm(f"Delete {n} messages ({', '.join(chosen)}) and their attempts, and the "
             "attachments no message refers to any more?", yes)
    with engine.begin() as conn:
        actions.log_purge(conn, older_than, chosen, n, actor=cli_audit.actor(), reason=reason)
    started = time.monotonic()
    totals = purging.PurgeTotals()
    if n:
        totals = purging.purge_in_batches(engine, older_than, chosen, batch=batch, pause=pause,
                                          progress=_purge_progress(n))
    click.echo(f"purged {totals.messages} messages and {totals.attempts} attempts, and "
               f"{_purge_attachments(engine)} attachments no message refers to")
    if totals.batches:
        click.echo(f"{totals.batches} transactions of up to {batch} rows in "
                   f"{time.monotonic() - started:.0f} s; the longest took "
                   f"{totals.longest_batch * 1000:.0f} ms")


def _purge_progress(expected: int) -> Callable[[purging.PurgeTotals], None] | None:
    """A progress line on the terminal about every 10 s; nothing when piped or cron'd."""
    if not sys.stderr.isatty():
        return None
    last = [time.monotonic()]

    def report(totals: purging.PurgeTotals) -> None:
        if time.monotonic() - last[0] >= PROGRESS_EVERY:
            last[0] = time.monotonic()
            click.echo(f"purged {totals.messages} of {expected} messages...", err=True)

    return report


PROGRESS_EVERY = 10.0  # seconds between progress lines of a long purge


def _purge_attachments(engine: Any) -> int:
    """Delete unreferenced attachment contents in small transactions. A content an
    enqueue links meanwhile is skipped (and tried again on the next purge)."""
    from mailout.db import attachments

    total, misses = 0, 0
    while misses < ORPHAN_TRIES:
        with engine.begin() as conn:
            deleted = attachments.purge_orphans(conn, batch=ORPHAN_BATCH)
            remaining = attachments.count_orphans(conn) if deleted < ORPHAN_BATCH else 1
        total += deleted
        if remaining == 0:
            break
        misses = 0 if deleted else misses + 1
    return total


ORPHAN_BATCH = 100  # contents can be megabytes each: small batches, short transactions
ORPHAN_TRIES = 3  # batches in a row that an enqueue got in the way of before giving up


COMMANDS = (retry_cmd, cancel_cmd, purge_cmd)
