"""The ``mailout`` command line.

Exit codes: 0 success; 1 operational failure (a mailout error, an unreachable or
unmigrated database, a failed ``check``, a refused or declined confirmation);
2 usage error (unknown option, bad value, bad message input). Listing commands
take ``--json`` and then print one JSON document with stable field names.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any, cast

import click
from sqlalchemy.exc import DBAPIError, OperationalError

from mailout import db
from mailout.cli import audit as cli_audit
from mailout.cli import bounces, changes, common, dev, display, rollout, terminal
from mailout.cli import web as cli_web
from mailout.cli.common import (
    DB_HELP,
    EXIT_SOME_NOT_SENT,
    EXIT_TRANSPORT_DOWN,
    EXIT_WORKER_FAILED,
    LIMIT,
)
from mailout.db import audit, migrate, operator
from mailout.delivery.policy import Lane
from mailout.exceptions import InvalidMessage, MailoutError, NotFound, WorkerFailed
from mailout.models import Status
from mailout.support.logs import configure_logging

# -- commands ----------------------------------------------------------------

@click.group()
@click.option("--db", "db_url", envvar="MAILOUT_DATABASE_URL", help=DB_HELP)
@click.option("-v", "--verbose", count=True, help="More logging (-vv for debug).")
@click.pass_context
def cli(ctx: click.Context, db_url: str | None, verbose: int) -> None:
    """mailout: reliable transactional email from a database outbox."""
    level = logging.WARNING - 10 * min(verbose, 2)
    log_format = os.environ.get("MAILOUT_LOG_FORMAT") or "text"
    if log_format.lower() not in ("text", "json"):
        raise click.UsageError(f"MAILOUT_LOG_FORMAT must be text or json, got {log_format!r}")
    configure_logging(log_format, level)
    if db_url is not None and not db_url.strip():
        raise click.BadParameter("is empty: give a database URL, or leave --db out to use "
                                 "MAILOUT_DATABASE_URL (default sqlite:///mailout.db)",
                                 param_hint="--db")
    ctx.obj = {"db_url": db_url}


@cli.group("db")
def db_group() -> None:
    """Database schema: apply or print the migrations."""


@db_group.command("upgrade")
@click.pass_obj
def db_upgrade(obj: dict[str, Any]) -> None:
    """Apply the migrations (idempotent); say whether anything was applied."""
    engine = db.make_engine(obj["db_url"])
    before = migrate.current_revision(engine)
    migrate.upgrade(engine)
    after = migrate.current_revision(engine)
    if before == after:
        click.echo(f"database already at revision {after}: nothing to apply")
    else:
        click.echo(f"migrated from {before or 'an empty database'} to revision {after}")


@db_group.command("sql")
@click.option("--dialect", type=click.Choice(["postgresql", "sqlite", "mysql"]),
              default="postgresql", show_default=True)
def db_sql(dialect: str) -> None:
    """Print the migrations as plain SQL, for teams that run their own."""
    click.echo(migrate.migration_sql(dialect))


@cli.command("worker")
@click.option("--queues", help="Comma-separated queues to serve (default: all).")
@click.option("--concurrency", type=click.IntRange(min=1),
              help="Concurrent sends [env: MAILOUT_CONCURRENCY].")
@click.option("--lanes", help="Lanes, e.g. critical:4,default:8,bulk:2; critical:4@1 runs "
                               "that lane alone in 1 process of its own [env: MAILOUT_LANES].")
@click.option("--poll-only", is_flag=True,
              help="No LISTEN/NOTIFY, poll only (behind PgBouncer: see MAILOUT_LISTEN_URL).")
@click.option("--processes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes to run on this machine.")
@click.option("--until-idle", is_flag=True, help="Exit once no message is due.")
@click.option("--metrics-port", type=click.IntRange(1, 65535), envvar="MAILOUT_METRICS_PORT",
              help="Serve /metrics, /healthz and /readyz on this port; with --processes N, "
                   "on this port and the N-1 after it [env: MAILOUT_METRICS_PORT; default: off].")
@click.option("--metrics-host", envvar="MAILOUT_METRICS_HOST", default="127.0.0.1",
              help="Address the metrics server binds; 0.0.0.0 for every interface "
                   "[env: MAILOUT_METRICS_HOST; default: 127.0.0.1].")
@click.option("--log-format", type=click.Choice(["text", "json"], case_sensitive=False),
              envvar="MAILOUT_LOG_FORMAT",
              help="Log lines as text or JSON [env: MAILOUT_LOG_FORMAT; default: text].")
@click.pass_obj
def worker_cmd(obj: dict[str, Any], queues: str | None, concurrency: int | None,
               lanes: str | None, poll_only: bool, processes: int, until_idle: bool,
               metrics_port: int | None, metrics_host: str, log_format: str | None) -> None:
    """Send due messages.

    Runs until SIGTERM/SIGINT, which stop claiming and let in-flight sends finish.
    Settings come from the environment (MAIL_FROM, SMTP_*, MAILOUT_*).
    """
    from mailout.worker import config
    from mailout.worker.build import run_worker

    if lanes and queues:
        raise click.UsageError("give --lanes or --queues, not both")
    settings = config.load(database_url=obj["db_url"], concurrency=concurrency, lanes=lanes,
                           listen=False if poll_only else None)
    names = [q.strip() for q in queues.split(",") if q.strip()] if queues else None
    plan = _process_plan(settings.lane_list(names), processes)
    if processes > 1 or plan is not None:
        from mailout.worker.supervisor import supervise

        # The database URL reaches the children in their environment, never on their
        # command line: it may hold a password, and any local user can read a command
        # line (ps), while /proc/PID/environ is readable only by the same user.
        child_env = ({**os.environ, "MAILOUT_DATABASE_URL": obj["db_url"]}
                     if obj["db_url"] else None)
        args = ["worker"]
        args += [f"--queues={queues}"] if queues else []
        args += [f"--concurrency={concurrency}"] if concurrency else []
        args += [f"--lanes={lanes}"] if lanes and plan is None else []
        args += ["--poll-only"] * poll_only + ["--until-idle"] * until_idle
        args += [f"--log-format={log_format}"] if log_format else []
        args += [f"--metrics-host={metrics_host}"]
        port = metrics_port  # one port per child: each is its own Prometheus target

        def per_child(i: int) -> list[str]:
            own = [f"--lanes={plan[i]}"] if plan is not None else []
            return own + ([f"--metrics-port={port + i}"] if port else [])
        children = processes if plan is None else len(plan)
        raise click.exceptions.Exit(supervise(children, args, until_idle=until_idle,
                                              per_child=per_child, env=child_env))
    if log_format:
        configure_logging(log_format, logging.getLogger().level)
    logging.getLogger("mailout").setLevel(min(logging.getLogger().level, logging.INFO))
    try:
        worker = run_worker(settings, queues=names, until_idle=until_idle,
                            metrics_port=metrics_port, metrics_host=metrics_host)
    except WorkerFailed as exc:
        # A part of the worker kept failing (its log says which, and where): the
        # worker stopped itself, and a supervisor (--processes, systemd) restarts it.
        click.echo(f"mailout: worker failed: {terminal.one_line(exc)}", err=True)
        raise click.exceptions.Exit(EXIT_WORKER_FAILED) from None
    if worker.halted is not None:
        # --until-idle with a transport that cannot send: say why, in one line, and
        # exit with a code a script can tell from a crash (1) or a usage error (2).
        click.echo(f"mailout: stopped: {terminal.one_line(worker.halted)}", err=True)
        raise click.exceptions.Exit(EXIT_TRANSPORT_DOWN)
    if until_idle:
        # Failures are in the last line too, and in the exit code: "idle: 0 sent" with
        # exit 0 used to end a run whose only message had failed to render.
        others = "".join(f", {n} {status}" for status, n in sorted(worker.not_sent.items()))
        click.echo(f"idle: {worker.sent} sent{others}")
        if any(worker.not_sent[s.value] for s in (Status.FAILED, Status.DEAD, Status.UNKNOWN)):
            raise click.exceptions.Exit(EXIT_SOME_NOT_SENT)


def _process_plan(lanes: list[Lane], processes: int) -> list[str] | None:
    """Each worker process's lanes when a lane is pinned (``@N``); a usage error when
    the plan cannot run (see worker.supervisor.process_plan)."""
    from mailout.worker.supervisor import process_plan

    try:
        return process_plan(lanes, processes)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc


@cli.command("enqueue")
@click.option("--to", required=True, multiple=True,
              help="Recipient address (repeat for several); 'Name <addr>' keeps the name.")
@click.option("--cc", multiple=True, help="Cc address (repeatable).")
@click.option("--bcc", multiple=True, help="Bcc address (repeatable): in no header.")
@click.option("--reply-to", multiple=True, help="Reply-To address (repeatable).")
@click.option("--template", help="Template name (a folder under MAILOUT_TEMPLATES).")
@click.option("--params", help="Template params as a JSON object.")
@click.option("--locale", help="Template variant, e.g. es-MX (then es, then the default).")
@click.option("--subject", help="Subject, without a template (with --text and/or --html).")
@click.option("--text", help="Plain-text body, without a template.")
@click.option("--html", help="HTML body, without a template.")
@click.option("--attach", "attach", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Attach this file (repeatable); its type is guessed from its name.")
@click.option("--unsubscribe", multiple=True,
              help="List-Unsubscribe: an https URL and/or a mailto: URI.")
@click.option("--key", help="Idempotency key (default: random, no deduplication).")
@click.option("--queue", default="default", show_default=True,
              help="Queue (lane) to send it through, e.g. critical for login codes.")
@click.option("--priority", type=int, default=0, show_default=True, help="Higher goes first.")
@click.option("--send-at", help="ISO 8601 time to send at (no zone means UTC).")
@click.pass_obj
def enqueue_cmd(obj: dict[str, Any], to: tuple[str, ...], cc: tuple[str, ...],
                bcc: tuple[str, ...], reply_to: tuple[str, ...], template: str | None,
                params: str | None, locale: str | None, subject: str | None,
                text: str | None, html: str | None, attach: tuple[Path, ...],
                unsubscribe: tuple[str, ...], key: str | None, queue: str, priority: int,
                send_at: str | None) -> None:
    """Enqueue one message.

    Prints a JSON object: id, key, message_id, created (false when the key already
    existed). Give --template (and --params), or --subject with --text and/or --html.
    Invalid input exits 2 naming the option; a key that already holds a different
    message exits 1.
    """
    from mailout.models import Attachment
    from mailout.outbox import enqueue

    try:
        parsed = json.loads(params) if params else None
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--params") from None
    try:
        when_ = common.parse_moment(send_at) if send_at else None
    except ValueError:
        raise click.BadParameter("not an ISO 8601 date-time", param_hint="--send-at") from None
    try:
        files = [Attachment(path.name, path) for path in attach]
    except OSError as exc:
        raise click.BadParameter(f"cannot read {exc.filename}: {exc.strerror}",
                                 param_hint="--attach") from None
    engine = common.engine_for(obj)
    try:
        with engine.begin() as conn:
            result = enqueue(conn, to=list(to), template=template, params=parsed,
                             subject=subject, text=text, html=html, key=key, queue=queue,
                             priority=priority, send_at=when_, cc=list(cc) or None,
                             bcc=list(bcc) or None, reply_to=list(reply_to) or None,
                             attachments=files, unsubscribe=list(unsubscribe) or None,
                             locale=locale)
    except InvalidMessage as exc:
        # InvalidMessage names the enqueue() argument; the user typed the option.
        hint = "--attach" if exc.field == "attachments" else "--" + exc.field.replace("_", "-")
        raise click.BadParameter(exc.reason, param_hint=hint) from None
    click.echo(json.dumps({"id": result.id, "key": result.key,
                           "message_id": result.message_id, "created": result.created}))


@cli.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def status_cmd(obj: dict[str, Any], as_json: bool) -> None:
    """Counts, backlog and the last send.

    Counts per status and queue; per queue how many are due now, the age of the
    oldest due message and how late it is; the retrying, dead and unknown-outcome
    numbers; the time of the last send.
    """
    from mailout.db import pauses

    with common.engine_for(obj).connect() as conn:
        report = operator.status(conn)
        paused = pauses.list_pauses(conn)
    if as_json:
        doc = display.jsonable(report)
        doc["paused"] = display.jsonable(paused)
        click.echo(json.dumps(doc, indent=2))
        return
    out = display.console()
    display.print_status(out, report)
    for p in paused:
        why = f": {p['reason']}" if p["reason"] else ""
        out.print(terminal.plain("paused", "bold yellow"),
                  f"{p['kind']} {p['name']}{why} (since {display.when(p['created_at'])})")


@cli.command("list")
@click.option("--status", "statuses", help="Comma-separated statuses: pending, sending, "
              "sent, failed, dead, cancelled, unknown.")
@click.option("--queue", help="Only this queue.")
@click.option("--template", help="Only this template.")
@click.option("--since", callback=common.since_option, metavar="SPAN|ISO",
              help="Created since: 1h, 2d or an ISO date-time.")
@click.option("--limit", type=LIMIT, default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_cmd(obj: dict[str, Any], statuses: str | None, queue: str | None,
             template: str | None, since: timedelta | datetime | None, limit: int,
             as_json: bool) -> None:
    """List messages, newest first."""
    wanted = common.choose_statuses(statuses, "--status", allowed=Status) if statuses else []
    with common.engine_for(obj).connect() as conn:
        rows = operator.list_messages(conn, statuses=wanted, queue=queue, template=template,
                                      since=since, limit=limit)
    if as_json:
        click.echo(display.to_json(rows))
        return
    display.print_list(display.console(), rows)


def _find(conn: Any, ref: str) -> tuple[operator.MessageRecord, str]:
    # Ids, keys, Message-IDs and provider ids are all printable ASCII.
    if not ref.strip() or not all(" " <= ch <= "~" for ch in ref):
        raise click.BadParameter(f"{ref!r} is not an id, key, Message-ID or provider id "
                                 "(those are printable ASCII)", param_hint="ID_OR_KEY")
    found = operator.find(conn, ref)
    if found is None:
        raise NotFound(ref)
    return found


@cli.command("show")
@click.argument("ref", metavar="ID_OR_KEY")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def show_cmd(obj: dict[str, Any], ref: str, as_json: bool) -> None:
    """Show one message, its attempt timeline and the operator actions on it.

    ID_OR_KEY is a row id or an idempotency key (a Message-ID or provider id works
    too). The message's params and body are never shown. Delivery events linked to
    the message (bounces, complaints, deliveries) follow the timeline.
    """
    from mailout.db import recipients
    from mailout.db.delivery_events import events_for

    with common.engine_for(obj).connect() as conn:
        msg, _how = _find(conn, ref)
        log = operator.attempt_log(conn, msg.id)
        each = recipients.recipients(conn, msg.id)
        events = events_for(conn, msg.id)
        history = audit.for_message(conn, msg.id)
    if as_json:
        click.echo(display.to_json({"message": msg, "attempts": log, "recipients": each,
                                    "events": events, "audit": history}))
        return
    out = display.console()
    display.print_message(out, msg, log, each, history)
    if events:
        bounces.print_events(out, events, title="Delivery events")


@cli.command("trace")
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def trace_cmd(obj: dict[str, Any], ref: str, as_json: bool) -> None:
    """Link a key, Message-ID or provider id to the others.

    REF is an idempotency key, a Message-ID (with or without <>), a provider message
    id or a row id. Prints all of them with the created, first attempt, sent and
    finished times, and the delivery events (bounces, complaints...) linked to it.
    """
    from mailout.db import recipients
    from mailout.db.delivery_events import events_for

    with common.engine_for(obj).connect() as conn:
        msg, how = _find(conn, ref)
        each = recipients.recipients(conn, msg.id)
        events = events_for(conn, msg.id)
    doc = display.trace_doc(msg, how, each)
    if as_json:
        click.echo(display.to_json({**doc, "events": events}))
        return
    out = display.console()
    display.print_trace(out, ref, doc)
    if events:
        bounces.print_events(out, events, title="Delivery events")


@cli.command("check")
@click.pass_obj
def check_cmd(obj: dict[str, Any]) -> None:
    """Check the database and the SMTP server.

    The database must answer and be migrated; the SMTP server must accept a
    connection, EHLO, STARTTLS and AUTH as configured. Nothing is sent. Exits 1,
    saying what is wrong, if anything is. Warns (WARN, exit 0) when the EHLO name is
    not a fully qualified domain name.
    """
    from mailout.cli import preflight
    from mailout.worker import config

    settings = config.load(database_url=obj["db_url"])
    ok_transport, line, warnings = preflight.check_transport(settings.transport)
    results = [preflight.check_database(settings.database_url), (ok_transport, line)]
    for ok, said in results:
        click.echo(("ok     " if ok else "FAILED ") + terminal.one_line(said))
    for warning in warnings:  # worth fixing, but sending works: the exit status stays 0
        click.echo("WARN   " + terminal.one_line(warning))
    if not all(ok for ok, _ in results):
        raise click.exceptions.Exit(1)


@cli.command("demo")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=Path("mailout-demo"), show_default=True,
              help="Where the demo database, templates and .eml files go (reset each run).")
def demo_cmd(directory: Path) -> None:
    """Run the whole pipeline locally in a few seconds.

    A SQLite file, an in-process SMTP sink writing .eml files, the example templates,
    a deduplicated enqueue, a retried and a rejected message. Nothing keeps running.
    """
    from mailout.cli import demo

    demo.run(directory, display.console())


for _command in (*changes.COMMANDS, *rollout.COMMANDS, *bounces.COMMANDS, cli_audit.audit_cmd,
                 cli_web.web_cmd, dev.dev_sink_cmd):
    cli.add_command(_command)


def _db_error(exc: DBAPIError) -> str:
    # Not str(exc): it carries the statement's parameters, which can hold message content.
    orig = exc.orig if exc.orig is not None else exc
    first = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    return f"database error ({type(orig).__name__}): {first}"


def run(args: list[str] | None = None, prog_name: str | None = None) -> int:
    """Run one command (``args``, else ``sys.argv``); errors become a one-line message
    on stderr. Returns the exit code. ``manage.py mailout`` runs commands this way."""
    try:
        rc = cli.main(args, prog_name=prog_name, standalone_mode=False)
    except click.ClickException as exc:
        # Its message may quote what was typed or stored: control characters written out.
        exc.show(file=cast(IO[str], terminal.CleanStream(sys.stderr)))  # a text stream
        return exc.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        return 1
    except MailoutError as exc:
        click.echo(f"error: {terminal.one_line(exc)}", err=True)
        return 1
    except (OperationalError, DBAPIError) as exc:
        click.echo(f"error: {_db_error(exc)}", err=True)
        return 1
    return rc if isinstance(rc, int) else 0


def main() -> None:
    """Console entry point: errors become a one-line message and an exit code."""
    sys.exit(run())
