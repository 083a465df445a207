"""Every CLI command an operator runs, and the console's pages, through PgBouncer in
transaction mode (``MAILOUT_PGBOUNCER=transaction``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import psycopg
import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url

from mailout import db
from mailout.db.schema import messages
from mailout.outbox import EnqueueSettings, enqueue
from tests.acceptance.cli.test_main import mailout
from tests.support.webconsole import ADMIN_TOKEN, EXAMPLES, serve_console

pytestmark = pytest.mark.slow  # a subprocess per command

ENQUEUE = EnqueueSettings(message_id_domain="shop.example.com", templates_dir=EXAMPLES)
# Each page more than psycopg's default prepare_threshold (5) times, so that psycopg
# would prepare its statements.
ROUNDS = 7
# Browsers at once, as a pooler sees them. (This test passes without
# prepare_threshold=None too: the console's statements were not seen to land on a
# server connection other than the one that prepared them. test_drain's enqueue does.)
BROWSERS = 4


def test_every_cli_command_works_through_pgbouncer(bounced_url: str, pg_url: str) -> None:
    env = {"MAILOUT_DATABASE_URL": bounced_url, "MAILOUT_PGBOUNCER": "transaction"}
    mailout("db", "upgrade", env=env)
    made = json.loads(mailout("enqueue", "--to", "ann@example.com", "--subject", "Hi",
                              "--text", "x", "--key", "cli-1", env=env).stdout)
    rid = made["id"]
    with db.make_engine(pg_url).connect() as conn:  # PostgreSQL itself has the row
        assert conn.execute(select(messages.c.idempotency_key)
                            .where(messages.c.id == rid)).scalar_one() == "cli-1"
    assert json.loads(mailout("status", "--json", env=env).stdout)
    assert "ann@example.com" in mailout("list", env=env).stdout
    assert json.loads(mailout("show", "cli-1", "--json", env=env).stdout)["message"]["id"] == rid
    mailout("trace", "cli-1", env=env)
    assert "cancelled 1" in mailout("cancel", str(rid), env=env).stdout
    assert "requeued 1" in mailout("retry", str(rid), "--yes", env=env).stdout
    mailout("pause", "--queue", "default", "--reason", "test", env=env)
    mailout("resume", "--queue", "default", env=env)
    mailout("report", env=env)
    assert mailout("audit", "--json", env=env).stdout
    mailout("suppress", "add", "bob@example.com", "--by", "test", env=env)
    assert "bob@example.com" in mailout("suppress", "list", env=env).stdout
    mailout("suppress", "check", "bob@example.com", env=env)
    mailout("suppress", "history", "bob@example.com", env=env)
    mailout("suppress", "remove", "bob@example.com", "--reason", "test", "--by", "test",
            env=env)
    mailout("bounces", "events", env=env)
    mailout("cancel", str(rid), env=env)
    mailout("purge", "--older-than", "0s", "--force", "--yes", "--pause", "0", env=env)
    with db.make_engine(pg_url).connect() as conn:
        assert conn.execute(select(messages.c.id)).all() == []  # purged


@contextmanager
def other_clients(url: str, count: int = 3) -> Iterator[None]:
    """Other applications' short transactions through the same PgBouncer while the
    block runs, so that the console's transactions land on whichever server
    connection is free (alone, a client gets the same one back each time)."""
    stop = threading.Event()
    libpq = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)

    def client() -> None:
        with psycopg.connect(libpq, prepare_threshold=None) as conn:
            while not stop.is_set():
                with conn.transaction():
                    conn.execute("SELECT pg_sleep(0.005)")

    threads = [threading.Thread(target=client) for _ in range(count)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join()


def test_console_pages_work_through_pgbouncer(bounced_url: str) -> None:
    engine = db.make_engine(bounced_url)
    with engine.begin() as conn:
        rid = enqueue(conn, to="dana@example.com", subject="Order", text="plain",
                      html="<p>hello</p>", key="web-1", settings=ENQUEUE).id
    engine.dispose()
    pages = ("/", "/messages", f"/messages/{rid}", f"/messages/{rid}/body.html",
             f"/messages/{rid}/message.eml", "/audit", "/templates")
    with serve_console(bounced_url) as console:
        def browse(_: int) -> list[tuple[str, int]]:
            with httpx.Client(base_url=console.url, timeout=60,
                              headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as http:
                return [(page, http.get(page).status_code)
                        for _ in range(ROUNDS) for page in pages]

        with other_clients(bounced_url), ThreadPoolExecutor(BROWSERS) as pool:
            fetched = [got for each in pool.map(browse, range(BROWSERS)) for got in each]
    assert len(fetched) == BROWSERS * ROUNDS * len(pages)
    assert {status for _, status in fetched} == {200}, [f for f in fetched if f[1] != 200][:5]
