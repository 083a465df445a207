"""Rollout and review commands: pause, resume, resolve, report."""

from __future__ import annotations

from typing import Any

import click

from mailout import db
from mailout.cli import common, display
from mailout.cli.audit import REASON_HELP, actor
from mailout.db import actions, stats
from mailout.db.actions import PauseKind, Resolution


def _target(queue: str | None, template: str | None) -> tuple[PauseKind, str]:
    if (queue is None) == (template is None):
        raise click.UsageError("give exactly one of --queue or --template")
    if queue is not None:
        return PauseKind.QUEUE, queue
    return PauseKind.TEMPLATE, template or ""


@click.command("pause")
@click.option("--queue", help="Pause this queue.")
@click.option("--template", help="Pause this template.")
@click.option("--reason", help="Why, for whoever looks at `mailout status` next.")
@click.pass_obj
def pause_cmd(obj: dict[str, Any], queue: str | None, template: str | None,
              reason: str | None) -> None:
    """Stop sending a queue or template on every worker, within seconds.

    Paused mail stays pending: it is neither failed nor dropped, and goes out after
    `mailout resume`. The switch lives in the database, so no redeploy is needed.
    """

    kind, name = _target(queue, template)
    with db.immediate(common.engine_for(obj)) as conn:  # reads, then writes
        changed = actions.pause(conn, kind, name, actor=actor(), reason=reason)
    click.echo(f"{kind.value} {name} {'paused' if changed else 'was already paused'}")


@click.command("resume")
@click.option("--queue", help="Resume this queue.")
@click.option("--template", help="Resume this template.")
@click.option("--reason", help=REASON_HELP)
@click.pass_obj
def resume_cmd(obj: dict[str, Any], queue: str | None, template: str | None,
               reason: str | None) -> None:
    """Undo `mailout pause`: workers pick the mail up within seconds."""

    kind, name = _target(queue, template)
    with db.immediate(common.engine_for(obj)) as conn:
        changed = actions.resume(conn, kind, name, actor=actor(), reason=reason)
    click.echo(f"{kind.value} {name} {'resumed' if changed else 'was not paused'}")


@click.command("resolve")
@click.argument("ids", nargs=-1, type=common.ROW_ID, required=True)
@click.option("--sent", "as_sent", is_flag=True,
              help="The provider confirms delivery: mark the rows sent.")
@click.option("--retry", "as_retry", is_flag=True,
              help="It was not delivered: send again (same Message-ID and key).")
@click.option("--provider-id", help="With --sent: the provider's message id, for trace.")
@click.option("--reason", help=REASON_HELP)
@click.pass_obj
def resolve_cmd(obj: dict[str, Any], ids: tuple[int, ...], as_sent: bool, as_retry: bool,
                provider_id: str | None, reason: str | None) -> None:
    """Settle messages parked in `unknown` after checking with the provider.

    Look the Message-ID up in the provider's logs first (`mailout show ID`). Only
    rows in status unknown are changed; others are reported as skipped.
    """

    if as_sent == as_retry:
        raise click.UsageError("give exactly one of --sent or --retry")
    wanted = list(ids)
    how = Resolution.SENT if as_sent else Resolution.RETRY
    with db.immediate(common.engine_for(obj)) as conn:
        done = actions.resolve(conn, wanted, how, actor=actor(), reason=reason,
                               provider_id=provider_id).changed
    skipped = [i for i in wanted if i not in done]
    verb = "marked sent" if as_sent else "requeued"
    click.echo(f"{verb} {len(done)}: {' '.join(map(str, done)) or '-'}")
    if skipped:
        click.echo(f"skipped {len(skipped)} (not unknown): {' '.join(map(str, skipped))}")


@click.command("report")
@click.option("--since", default="24h", show_default=True, metavar="SPAN",
              help="How far back, by creation time: 1h, 24h, 7d...")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def report_cmd(obj: dict[str, Any], since: str, as_json: bool) -> None:
    """Per template and queue: enqueued, sent, failed, dead, cancelled, pending, time to
    send, and bounced and complained messages with their rates (of those sent).

    Compare these counts with your business events during a rollout.
    """

    try:
        span = common.parse_span(since)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None
    with common.engine_for(obj).connect() as conn:
        rows = stats.rollout_report(conn, span)
    if as_json:
        click.echo(display.to_json(rows))
        return
    out = display.console()
    table = display.table("template", "queue", "enqueued", "sent", "failed", "dead",
                          "cancelled", "pending", "median", "p95", "bounced", "complained",
                          title=f"since {since}")
    for r in rows:
        cancelled = ", ".join(f"{k} {v}" for k, v in sorted(r.cancelled.items())) or "0"
        table.add_row(r.template, r.queue, str(r.enqueued), str(r.sent), str(r.failed),
                      str(r.dead), cancelled, str(r.pending),
                      display.age(r.median_seconds_to_send), display.age(r.p95_seconds_to_send),
                      _rate(r.bounced, r.bounce_rate), _rate(r.complained, r.complaint_rate))
    out.print(table)


def _rate(count: int, rate: float | None) -> str:
    return str(count) if rate is None else f"{count} ({rate:.1%})"


COMMANDS = (pause_cmd, resume_cmd, resolve_cmd, report_cmd)
