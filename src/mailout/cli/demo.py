"""``mailout demo``: the whole pipeline in a few seconds, with nothing installed.

1. A fresh SQLite file in the demo folder (the previous database and .eml files
   are deleted; nothing else there is touched).
2. An in-process SMTP sink (:mod:`mailout.transports.smtp.devsink`) writing ``mail/<n>.eml``, where
   ``flaky@`` fails once with 451 and ``nobody@`` is rejected with 550.
3. The packaged example templates, copied to ``templates/``.
4. Migrations, then enqueues inside business transactions (a ``demo_orders`` row
   and its confirmation commit together), including a deduplicated second enqueue.
5. Workers run until nothing is due within a few seconds, so the flaky retry
   happens during the demo.
6. A summary, and the commands to explore the result.

The sink is always stopped and the engine disposed, even on error.
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
import sys
from dataclasses import dataclass
from importlib.resources import as_file, files
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table as RichTable
from sqlalchemy import Column, Connection, Engine, Integer, MetaData, String, Table, insert

from mailout import db
from mailout.db import leasing, migrate, operator
from mailout.models import EnqueueResult
from mailout.outbox import EnqueueSettings, enqueue
from mailout.transports.smtp.devsink import DevSink
from mailout.worker import config
from mailout.worker.build import build_worker

TEMPLATES = ("order_confirmation", "password_reset", "invoice")
MAIL_FROM = "Demo Shop <shop@example.com>"
MESSAGE_ID_DOMAIN = "shop.example.com"
RETRY_HORIZON = 5.0  # keep running workers while a retry is due within this many seconds

# The application's own table: the demo's stand-in for a real business schema.
_business = MetaData()
demo_orders = Table(
    "demo_orders", _business,
    Column("id", Integer, primary_key=True),
    Column("customer", String(100), nullable=False),
    Column("email", String(320), nullable=False),
    Column("total_cents", Integer, nullable=False),
)

ORDER_1001 = {
    "customer_name": "Alice", "order_id": 1001, "currency": "EUR", "total": 49.90,
    "items": [{"name": "Espresso beans, 1 kg", "quantity": 1, "price": 29.90},
              {"name": "Ceramic cup", "quantity": 2, "price": 10.00}],
}
ORDER_1002 = {
    "customer_name": "Frank", "order_id": 1002, "currency": "EUR", "total": 12.50,
    "items": [{"name": "Tea sampler", "quantity": 1, "price": 12.50}],
}


@dataclass(frozen=True, slots=True)
class Enqueued:
    """What the demo enqueued."""

    keys: list[str]  # every demo message, in enqueue order
    original: EnqueueResult  # the order confirmation
    duplicate: EnqueueResult  # its second enqueue, deduplicated


def run(directory: Path, out: Console) -> Enqueued:
    """Run the demo in ``directory`` and print its summary to ``out``.

    Raises OSError if the sink cannot listen or the folder cannot be written.
    """
    directory = Path(directory)
    db_file, mail_dir, templates = _prepare(directory)
    url = f"sqlite:///{db_file}"
    engine = db.make_engine(url)
    try:
        with DevSink(mail_dir) as sink:
            out.print(f"SMTP sink listening on {sink.host}:{sink.port}, writing {mail_dir}/")
            migrate.upgrade(engine)
            result = _enqueue_all(engine, templates)
            out.print(f"enqueued {len(result.keys)} messages; running the worker...")
            asyncio.run(_send_all(_settings(url, sink, templates), engine))
            _summary(out, engine, sink, result, db_file)
    finally:
        engine.dispose()
    return result


def _prepare(directory: Path) -> tuple[Path, Path, Path]:
    """Start fresh: drop the previous database and .eml files, copy the templates."""
    directory.mkdir(parents=True, exist_ok=True)
    db_file = directory / "mailout.db"
    for name in ("mailout.db", "mailout.db-wal", "mailout.db-shm"):
        (directory / name).unlink(missing_ok=True)
    mail_dir = directory / "mail"
    for old in mail_dir.glob("*.eml"):
        old.unlink()
    templates = directory / "templates"
    with as_file(files("mailout.cli") / "demo_templates") as packaged:
        for name in TEMPLATES:
            shutil.copytree(packaged / name, templates / name, dirs_exist_ok=True)
    return db_file, mail_dir, templates


def _enqueue_all(engine: Engine, templates: Path) -> Enqueued:
    es = EnqueueSettings(templates_dir=templates, message_id_domain=MESSAGE_ID_DOMAIN)
    with engine.begin() as conn:  # the business transaction: order row + its email
        demo_orders.create(conn, checkfirst=True)
        original = _order(conn, 1001, "Alice", "alice@example.com", ORDER_1001, es)
    with engine.begin() as conn:
        enqueue(conn, to="bob@example.com", template="password_reset", settings=es,
                key="user-42-password-reset-1",
                params={"name": "Bob", "expires_minutes": 30,
                        "reset_url": "https://shop.example.com/reset?token=demo-token"})
        enqueue(conn, to="carol@example.com", template="invoice", settings=es,
                key="invoice-2024-0001",
                params={"customer_name": "Carol", "invoice_number": "2024-0001",
                        "currency": "EUR", "amount_due": 120.00, "due_date": "2024-07-31",
                        "lines": [{"description": "Consulting, May", "amount": 120.00}]})
    with engine.begin() as conn:  # a retried request handler enqueues the same event again
        duplicate = enqueue(conn, to="alice@example.com", template="order_confirmation",
                            key="order-1001-confirmation", params=ORDER_1001, settings=es)
    with engine.begin() as conn:
        _order(conn, 1002, "Frank", "flaky@example.com", ORDER_1002, es)
        enqueue(conn, to="nobody@example.com", template="password_reset", settings=es,
                key="user-99-password-reset-1",
                params={"name": "Nobody", "expires_minutes": 30,
                        "reset_url": "https://shop.example.com/reset?token=demo-token-2"})
    keys = ["order-1001-confirmation", "user-42-password-reset-1", "invoice-2024-0001",
            "order-1002-confirmation", "user-99-password-reset-1"]
    return Enqueued(keys, original, duplicate)


def _order(conn: Connection, order_id: int, customer: str, email: str,
           params: dict[str, Any], es: EnqueueSettings) -> EnqueueResult:
    conn.execute(insert(demo_orders).values(id=order_id, customer=customer, email=email,
                                            total_cents=round(params["total"] * 100)))
    return enqueue(conn, to=email, template="order_confirmation", params=params,
                   key=f"order-{order_id}-confirmation", settings=es)


def _settings(url: str, sink: DevSink, templates: Path) -> config.Settings:
    # Retries a fifth of a second apart (the floor follows a tiny base), so the flaky
    # message's retry happens while the demo runs.
    return config.load(env={
        "MAILOUT_DATABASE_URL": url, "MAIL_FROM": MAIL_FROM,
        "SMTP_HOST": sink.host, "SMTP_PORT": str(sink.port), "SMTP_TLS": "none",
        "SMTP_TIMEOUT": "5", "MAILOUT_TEMPLATES": str(templates),
        "MAILOUT_RETRY_BASE_SECONDS": "0.2", "MAILOUT_RETRY_CAP_SECONDS": "1",
        "MAILOUT_POLL_SECONDS": "0.1", "MAILOUT_CONCURRENCY": "4",
    })


async def _send_all(settings: config.Settings, engine: Engine) -> None:
    """Run until-idle workers while something is due within RETRY_HORIZON seconds."""
    while True:
        worker = build_worker(settings, engine=engine, until_idle=True)
        try:
            await worker.run()
        finally:
            worker.alerts.close()
        with engine.connect() as conn:
            due_in = leasing.next_due_in(conn)
        if due_in is None or due_in > RETRY_HORIZON:
            return
        await asyncio.sleep(due_in + 0.05)


def _summary(out: Console, engine: Engine, sink: DevSink, result: Enqueued,
             db_file: Path) -> None:
    eml = {d.message_id: d.path for d in sink.delivered}
    rows: list[operator.MessageRecord] = []
    with engine.connect() as conn:
        for key in result.keys:
            found = operator.find(conn, key)
            if found is not None:
                rows.append(found[0])
    out.print()
    for r in rows:
        path = eml.get(r.message_id)
        status = r.status + (f" ({r.reason})" if r.reason else "")
        card = RichTable(title=r.key, title_justify="left", show_header=False, box=box.ROUNDED)
        card.add_column("field", style="dim")
        card.add_column("value", overflow="fold")
        for name, value in (("recipient", r.recipient), ("status", status),
                            ("attempts", str(r.attempts)), ("Message-ID", r.message_id),
                            ("provider id", r.provider_message_id or "-"),
                            (".eml", str(path) if path else "- (nothing delivered)")):
            card.add_row(name, value)
        out.print(card)
    dup, first = result.duplicate, result.original
    out.print(f"Deduplicated: the second enqueue of {dup.key} returned created={dup.created} "
              f"and the same row (id {dup.id} = {first.id}): one row, one email.")
    for r in rows:
        if r.status == "failed":
            out.print(f"Failed: {r.recipient} was rejected permanently "
                      f"({r.last_reply_code} {r.last_reply_text}); not retried.")
        elif r.status == "sent" and r.attempts > 1:
            out.print(f"Retried: {r.recipient} got a temporary failure and was sent on attempt "
                      f"{r.attempts}, with the same Message-ID.")
    out.print(f"{len(sink.delivered)} messages in {sink.directory}/; the SMTP sink is stopped.")
    _next_steps(out, db_file, rows)


def command_name() -> str:
    """How to run ``mailout`` again from this shell: ``mailout`` when that is on PATH
    and is this program, else the path this one was started by (``.venv/bin/mailout``
    when the venv is not activated), else ``python -m mailout``."""
    started = Path(sys.argv[0])
    on_path = shutil.which("mailout")
    if on_path and started.name == "mailout" and Path(on_path).resolve() == started.resolve():
        return "mailout"
    if started.name == "mailout" and started.is_file():
        return shlex.quote(str(started))
    return f"{shlex.quote(sys.executable)} -m mailout"


def _next_steps(out: Console, db_file: Path, rows: list[operator.MessageRecord]) -> None:
    base = f"{command_name()} --db sqlite:///{db_file}"
    first = rows[0] if rows else None
    out.print("\nWhat to run next:")
    out.print(f"  {base} status")
    out.print(f"  {base} list")
    if first is not None:
        out.print(f"  {base} show {first.key}")
        out.print(f"  {base} trace '{first.message_id}'")
        if first.provider_message_id:
            out.print(f"  {base} trace {first.provider_message_id}")
    failed = [r for r in rows if r.status == "failed"]
    if failed:
        out.print(f"  {base} list --status failed")

