"""Bounce, complaint and suppression commands: ``webhooks serve``, ``bounces ingest``,
``bounces events`` and ``suppress list|add|remove|check|history``."""

from __future__ import annotations

import getpass
import json
import logging
import socket
import sys
from pathlib import Path
from typing import Any

import click

from mailout.cli import display
from mailout.cli.common import LIMIT, WEBHOOKS_PORT
from mailout.cli.terminal import one_line
from mailout.db.delivery_events import MAIL_REPORT_PROVIDERS
from mailout.exceptions import InvalidMessage
from mailout.message import addresses
from mailout.message.addresses import normalize_address
from mailout.models import Event

log = logging.getLogger(__name__)


def _engine(obj: dict[str, Any]) -> Any:
    from mailout.cli.common import engine_for

    return engine_for(obj)


def _actor(given: str | None) -> str:
    if given:
        return given
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except (OSError, KeyError):
        return "unknown"


# -- webhooks ---------------------------------------------------------------------------

@click.group("webhooks")
def webhooks_group() -> None:
    """Receive provider webhooks (bounces, complaints, deliveries)."""


@webhooks_group.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on (loopback unless a proxy needs otherwise).")
@click.option("--port", type=click.IntRange(1, 65535), default=WEBHOOKS_PORT, show_default=True)
@click.pass_obj
def serve_cmd(obj: dict[str, Any], host: str, port: int) -> None:
    """Serve POST /webhooks/<provider> for every provider whose secret is set.

    Secrets come from the environment (MAILOUT_WEBHOOK_*); they and the request
    bodies are never logged. Also serves /healthz and /metrics. Stops on SIGTERM.
    """
    try:
        import uvicorn

        from mailout.webhooks.app import standalone_app
        from mailout.webhooks.settings import load
    except ImportError as exc:
        raise click.ClickException(f"the webhook server needs the webhooks extra "
                                   f"(pip install 'mailout[webhooks]'): {exc.name}") from None
    settings = load()
    if not settings.providers:
        raise click.ClickException("no provider is configured: set at least one "
                                   "MAILOUT_WEBHOOK_* secret (see docs/webhooks.md)")
    engine = _engine(obj)
    app = standalone_app(engine, settings)
    logging.getLogger("mailout").setLevel(min(logging.getLogger().level, logging.INFO))
    if settings.sns_test_origin:
        log.warning("*** MAILOUT_SNS_TEST_ORIGIN is set: SNS certificates are also "
                    "accepted from %s. Tests only. ***", settings.sns_test_origin,
                    extra={"event": "sns_test_origin_set", "origin": settings.sns_test_origin})
    log.info("webhooks on http://%s:%d/webhooks/{%s}", host, port,
             ",".join(settings.providers),
             extra={"event": "webhooks_listening", "host": host, "port": port})
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                server_header=False, lifespan="off")


# -- bounces -------------------------------------------------------------------------------

@click.group("bounces")
def bounces_group() -> None:
    """Bounces and complaints that arrive as mail, and the stored events."""


@bounces_group.command("ingest")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--mbox", is_flag=True, help="Each FILE is an mbox of several reports.")
@click.option("--skip-invalid", is_flag=True,
              help="Report, count and skip every input that is not a bounce or complaint "
                   "report, instead of refusing the whole batch (for a pipe that also gets "
                   "other mail).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def ingest_cmd(obj: dict[str, Any], files: tuple[str, ...], mbox: bool, skip_invalid: bool,
               as_json: bool) -> None:
    """Read bounces and complaints from FILES, or stdin ('-' or none): RFC 3464
    DSNs, RFC 5965 ARF reports and plain-text bounces (qmail, Exim...).

    Every report is parsed first; one that is not a bounce stops the run with its name
    and the reason, and nothing is stored (unless --skip-invalid). Then all events are
    stored in one transaction, linked by Message-ID or by the signed VERP return path
    (MAILOUT_RETURN_PATH); a report linked to none of our messages is kept unverified
    and acts on nothing. For a Postfix pipe transport:
    ``mailout bounces ingest --skip-invalid -``.
    """
    from mailout.feedback import dsn
    from mailout.feedback.ingest import ingest
    from mailout.webhooks.settings import load_policy

    events: list[Event] = []
    skipped: list[str] = []
    for source, raw in _inputs(files or ("-",), mbox):
        try:
            events.extend(dsn.parse(raw, source))
        except dsn.ReportError as exc:
            if not skip_invalid:
                raise click.ClickException(f"{one_line(exc)}; nothing was stored") from None
            skipped.append(f"{exc.source}: {exc.reason}")
    policy = load_policy()
    from mailout.db.engine import immediate

    with immediate(_engine(obj)) as conn:
        result = ingest(conn, events, policy)
    _alert_sender_rejected(result.sender_rejected)
    doc = {"events": len(events), "stored": result.stored, "duplicates": result.duplicates,
           "matched": result.matched, "unmatched": result.unmatched,
           "unverified": result.unverified, "suppressed": list(result.suppressed),
           "sender_rejected": result.sender_rejected, "skipped": skipped}
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"{len(events)} events: {result.stored} stored, {result.duplicates} already "
               f"stored, {result.matched} matched, {result.unmatched} unmatched "
               f"({result.unverified} unverified: they act on nothing), "
               f"{len(result.suppressed)} addresses suppressed, {len(skipped)} inputs "
               "skipped")
    for line in skipped:
        click.echo(f"skipped {one_line(line)}", err=True)


def _alert_sender_rejected(count: int) -> None:
    """Bounces that blame our sender: the usual alert hooks (MAILOUT_ALERT_WEBHOOK)."""
    import os

    from mailout.feedback.rate_alert import sender_rejected_alert
    from mailout.support.alerts import Alerts

    alert = sender_rejected_alert(count, "mailout bounces ingest")
    if alert is None:
        return
    alerts = Alerts(webhook_url=os.environ.get("MAILOUT_ALERT_WEBHOOK") or None)
    alerts.fire(alert)
    alerts.close()


def _inputs(files: tuple[str, ...], mbox: bool) -> list[tuple[str, bytes]]:
    from mailout.feedback import dsn

    out: list[tuple[str, bytes]] = []
    for name in files:
        if name == "-":
            raw = sys.stdin.buffer.read(dsn.MAX_REPORT_BYTES + 1)
            if mbox:
                raise click.UsageError("--mbox reads files, not stdin")
            out.append(("<stdin>", raw))
        elif mbox:
            out.extend(_mbox(Path(name)))
        else:
            path = Path(name)
            if not path.is_file():
                raise click.BadParameter(f"{name}: no such file", param_hint="FILES")
            out.append((name, path.read_bytes()))
    return out


def _mbox(path: Path) -> list[tuple[str, bytes]]:
    from mailout.feedback import dsn

    if not path.is_file():
        raise click.BadParameter(f"{path}: no such file", param_hint="FILES")
    try:
        return list(dsn.read_mbox(path))
    except (OSError, ValueError) as exc:  # unreadable, or not an mbox the mailbox module reads
        raise click.ClickException(f"{one_line(str(path))}: cannot read it as an mbox "
                                   f"({type(exc).__name__})") from None


@bounces_group.command("events")
@click.option("--unmatched", is_flag=True, help="Only events that matched no message.")
@click.option("--type", "types", help="Comma-separated: delivered, bounced, deferred, "
              "complained, unsubscribed, rejected.")
@click.option("--provider", help="Only this provider (resend, ses, dsn, arf...).")
@click.option("--limit", type=LIMIT, default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def events_cmd(obj: dict[str, Any], unmatched: bool, types: str | None,
               provider: str | None, limit: int, as_json: bool) -> None:
    """The newest events, and counts by provider, type and whether they matched."""
    from mailout.db import delivery_events

    wanted = [t.strip() for t in (types or "").split(",") if t.strip()]
    with _engine(obj).connect() as conn:
        rows = delivery_events.list_events(conn, unmatched=unmatched, types=wanted,
                                           provider=provider, limit=limit)
        counts = delivery_events.event_counts(conn)
    if as_json:
        click.echo(display.to_json({"events": rows, "counts": [
            {"provider": p, "type": t, "matched": m, "count": n} for p, t, m, n in counts]}))
        return
    out = display.console()
    print_events(out, rows, title="Events")
    totals = display.table("provider", "type", "matched", "unmatched", title="Counts")
    merged: dict[tuple[str, str], list[int]] = {}
    for p, t, matched, n in counts:
        merged.setdefault((p, t), [0, 0])[0 if matched else 1] += n
    for (p, t), (yes, no) in sorted(merged.items()):
        totals.add_row(one_line(p), one_line(t), str(yes), str(no))
    out.print(totals)


def print_events(out: Any, rows: list[Any], title: str) -> None:
    """Events as a table (the payload is never shown)."""
    if not rows:
        out.print("no events")
        return
    grid = display.table("time (UTC)", "provider", "event", "reason", "recipient", "message",
                         "detail", title=title, keep=("time (UTC)",))
    for r in rows:
        kind = f"{r.type} ({r.subtype})" if r.subtype else r.type
        linked = (f"#{r.outbox_id} by {r.matched_by}" if r.outbox_id
                  else "unverified" if r.provider in MAIL_REPORT_PROVIDERS else "unmatched")
        grid.add_row(display.when(r.occurred_at), one_line(r.provider), one_line(kind),
                     one_line(r.reason or ""), one_line(r.recipient), one_line(linked),
                     one_line(r.diagnostic or ""))
    out.print(grid)


# -- suppress ------------------------------------------------------------------------------

@click.group("suppress")
def suppress_group() -> None:
    """The suppression list: addresses no mail is sent to (reason `suppressed`)."""


def _address(raw: str) -> str:
    try:
        return normalize_address(addresses.address("ADDRESS", raw.strip()))
    except InvalidMessage as exc:
        raise click.BadParameter(exc.reason, param_hint="ADDRESS") from None


@suppress_group.command("list")
@click.option("--reason", help="Only this reason: hard_bounce, soft_bounces, complaint, "
              "unsubscribe, manual.")
@click.option("--limit", type=LIMIT, default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def suppress_list(obj: dict[str, Any], reason: str | None, limit: int, as_json: bool) -> None:
    """Suppressed addresses, newest first."""
    from mailout.db import suppressions

    with _engine(obj).connect() as conn:
        rows = suppressions.list_suppressions(conn, reason=reason, limit=limit)
    if as_json:
        click.echo(display.to_json(rows))
        return
    out = display.console()
    if not rows:
        out.print("no suppressed addresses")
        return
    grid = display.table("address", "reason", "since (UTC)", "by", "detail",
                         keep=("since (UTC)",))
    for s in rows:
        grid.add_row(one_line(s.address), one_line(s.reason), display.when(s.created_at),
                     one_line(s.created_by), one_line(s.detail))
    out.print(grid)


@suppress_group.command("add")
@click.argument("address")
@click.option("--reason", default="manual", show_default=True)
@click.option("--note", help="Why, for whoever reads the list later.")
@click.option("--by", "actor", help="Who adds it [default: user@host].")
@click.pass_obj
def suppress_add(obj: dict[str, Any], address: str, reason: str, note: str | None,
                 actor: str | None) -> None:
    """Suppress ADDRESS: mail to it is cancelled at send time."""
    from mailout.db import suppressions

    addr = _address(address)
    with _engine(obj).begin() as conn:
        added = suppressions.suppress(conn, addr, reason[:32], detail=note, actor=_actor(actor))
    click.echo(f"{addr} {'suppressed' if added else 'was already suppressed'}")


@suppress_group.command("remove")
@click.argument("address")
@click.option("--reason", "note", required=True,
              help="Why it may receive mail again (kept in the suppression log).")
@click.option("--by", "actor", help="Who removes it [default: user@host].")
@click.pass_obj
def suppress_remove(obj: dict[str, Any], address: str, note: str, actor: str | None) -> None:
    """Remove ADDRESS from the list; who and why are logged (`suppress history`)."""
    from mailout.db import suppressions
    from mailout.db.engine import immediate

    addr = _address(address)
    with immediate(_engine(obj)) as conn:  # reads, then deletes: SQLite's lock first
        removed = suppressions.unsuppress(conn, addr, actor=_actor(actor), note=note)
    if removed is None:
        raise click.ClickException(f"{addr} is not suppressed")
    click.echo(f"{addr} removed (was {one_line(removed.reason)} since "
               f"{display.when(removed.created_at)})")


@suppress_group.command("check")
@click.argument("address")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def suppress_check(obj: dict[str, Any], address: str, as_json: bool) -> None:
    """Is ADDRESS suppressed, since when and why? Exit 0 either way."""
    from mailout.db import suppressions

    addr = _address(address)
    with _engine(obj).connect() as conn:
        found = suppressions.get_suppression(conn, addr)
    if as_json:
        click.echo(display.to_json({"address": addr, "suppressed": found is not None,
                                    "entry": found}))
    elif found is None:
        click.echo(f"{addr} is not suppressed")
    else:
        click.echo(f"{addr} is suppressed: {one_line(found.reason)} since "
                   f"{display.when(found.created_at)}"
                   + (f" ({one_line(found.detail)})" if found.detail else ""))


@suppress_group.command("history")
@click.argument("address")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def suppress_history(obj: dict[str, Any], address: str, as_json: bool) -> None:
    """Every addition and removal of ADDRESS, with who and why."""
    from mailout.db import suppressions

    addr = _address(address)
    with _engine(obj).connect() as conn:
        rows = suppressions.suppression_history(conn, addr)
    if as_json:
        click.echo(display.to_json(rows))
        return
    out = display.console()
    grid = display.table("time (UTC)", "action", "reason", "by", "note", keep=("time (UTC)",))
    for r in rows:
        grid.add_row(display.when(r.at), r.action, one_line(r.reason), one_line(r.actor),
                     one_line(r.note))
    out.print(grid if rows else "no history")


COMMANDS = (webhooks_group, bounces_group, suppress_group)
