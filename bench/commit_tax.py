"""What waking workers costs the application's commits, with pgbench (issue 38).

A business transaction (an order INSERT) plus the outbox row, then COMMIT, run by
pgbench (a C client: Python clients could not load the server on a small machine) at
``--clients`` connections (default 32), side by side in one run, the kinds
interleaved in ``--rounds`` rounds:

- ``bare``: the order and a hand-written INSERT of the outbox row, no NOTIFY;
- ``enqueue, after-commit``: the order and the statement enqueue() runs with the
  default ``MAILOUT_NOTIFY=after-commit`` (its one-row INSERT, rendered from a real
  message by mailout's own validation), while a second pgbench sends the after-commit
  wake-ups meanwhile at the most the waker may send: one statement per 10 ms window per
  application process (``--app-processes``, default 4: 32 connections as 4 processes
  of 8 threads), each on a connection of its own, in autocommit, as
  mailout.db.wakeups does;
- ``enqueue, off``: the same INSERT without the wake-ups (``MAILOUT_NOTIFY=off``),
  which tells the statement's cost from the wake-ups';
- ``enqueue, in-transaction``: the same INSERT with ``pg_notify`` riding in it, as
  ``MAILOUT_NOTIFY=in-transaction`` (and every enqueue before issue 38) runs it.

Prints each kind's transactions per second (the business transactions only) and its
ratio to ``bare`` (target for the default: >= 0.9).

    .venv/bin/python -m bench.commit_tax [--clients 32] [--seconds 15] [--rounds 3]
        [--app-processes 4] [--pgbench /usr/lib/postgresql/15/bin/pgbench]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from bench.common import scratch_database
from mailout import db
from mailout.db import migrate, wakeups
from mailout.db.stores import postgresql
from mailout.outbox import EnqueueSettings, Message, _validated_row

TARGET = 0.9
PG15_PGBENCH = "/usr/lib/postgresql/15/bin/pgbench"
ORDERS = """CREATE TABLE shop_order (id bigserial PRIMARY KEY, customer text NOT NULL,
    total_cents integer NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"""
ORDER = ("INSERT INTO shop_order (customer, total_cents) "
         "VALUES ('c' || CAST(:client_id AS text), :total);")
# Unique per transaction: the client and a random number (pgbench has no counter).
KEY = "'order-' || CAST(:client_id AS text) || '-' || CAST(:r AS text)"
MESSAGE_ID = "'<' || CAST(:client_id AS text) || '.' || CAST(:r AS text) || '@shop.example.com>'"
# A hand-written outbox row: the columns enqueue sets for this message, no ON CONFLICT.
BARE = """INSERT INTO mailout_messages (idempotency_key, queue, priority, status, recipient,
    template, params, message_id, created_at, next_attempt_at, expires_at)
VALUES ({key}, 'default', 0, 'pending', 'customer@example.com', 'order_confirmation',
    CAST('{{"order_id": 7, "total": "12.34", "items": ["a", "b"]}}' AS jsonb), {mid},
    clock_timestamp(), clock_timestamp(), clock_timestamp() + interval '1 day');"""
# What the waker sends after a commit: the queues of the ids it was given that are visible.
WAKE = wakeups._WAKE.text.replace(
    "CAST(:ids AS bigint[])", "ARRAY[(SELECT max(id) FROM mailout_messages)]")


def _enqueue_statement(conn: psycopg.Connection[object], notify: bool) -> str:
    """enqueue()'s one-row statement for a real message, values as literals, the key
    and Message-ID made unique per transaction with pgbench variables."""
    row = _validated_row(Message(
        to="customer@example.com", template="order_confirmation",
        params={"order_id": 7, "total": "12.34", "items": ["a", "b"]}, key="order-7"),
        EnqueueSettings(message_id_domain="shop.example.com"))
    params = postgresql.one_row(row)
    text = (postgresql.ONE_NOTIFY if notify else postgresql.ONE).element.text.strip()

    def literal(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "idempotency_key":
            return KEY
        if name == "message_id":
            return MESSAGE_ID
        return sql.Literal(params[name]).as_string(conn)

    return re.sub(r"(?<![:\w]):(\w+)", literal, text) + ";"


def _script(outbox: str) -> str:
    return ("\\set r random(1, 1000000000000)\n\\set total random(1, 100000)\n"
            f"BEGIN;\n{ORDER}\n{outbox}\nCOMMIT;\n")


def _one_line(statement: str) -> str:
    """pgbench reads one SQL command per line unless it ends in a semicolon: join them."""
    return " ".join(statement.split())


def _pgbench(exe: str, url: str, script: Path, clients: int, seconds: float,
             rate: float | None = None) -> subprocess.Popen[str]:
    u = make_url(url)
    env = {**os.environ, "PGPASSWORD": u.password or ""}
    cmd = [exe, "-n", "-M", "prepared", "-c", str(clients), "-j", str(min(clients, 2)),
           "-T", str(int(seconds)), "-h", u.host or "127.0.0.1", "-p", str(u.port or 5432),
           "-U", u.username or "postgres", "-f", str(script)]
    if rate is not None:
        cmd += ["-R", str(rate)]
    return subprocess.Popen([*cmd, u.database or "postgres"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _tps(proc: subprocess.Popen[str]) -> float:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"pgbench failed: {err.strip()[-500:]}")
    found = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    if found is None:
        raise RuntimeError(f"no tps in pgbench's output: {out[-500:]}")
    return float(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--app-processes", type=int, default=4,
                    help="application processes the clients stand for (one waker each)")
    ap.add_argument("--pgbench", default=PG15_PGBENCH if Path(PG15_PGBENCH).exists()
                    else shutil.which("pgbench") or "pgbench")
    args = ap.parse_args()
    wake_rate = args.app_processes / wakeups.WINDOW
    with scratch_database() as url, tempfile.TemporaryDirectory() as tmp:
        engine = db.make_engine(url)
        migrate.upgrade(engine)
        engine.dispose()
        libpq = make_url(url).set(drivername="postgresql").render_as_string(
            hide_password=False)
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(ORDERS)
            scripts = {
                "bare": _script(_one_line(BARE.format(key=KEY, mid=MESSAGE_ID))),
                "enqueue, off": _script(_one_line(_enqueue_statement(conn, False))),
                "enqueue, after-commit": _script(_one_line(_enqueue_statement(conn, False))),
                "enqueue, in-transaction": _script(_one_line(_enqueue_statement(conn, True))),
            }
        paths = {}
        for i, (kind, body) in enumerate(scripts.items()):
            paths[kind] = Path(tmp, f"kind{i}.sql")
            paths[kind].write_text(body)
        wake = Path(tmp, "wake.sql")
        wake.write_text(_one_line(WAKE) + ";\n")
        rates: dict[str, list[float]] = {k: [] for k in scripts}
        wakes: list[float] = []
        load = [os.getloadavg()[0]]
        for r in range(args.rounds):
            for kind in scripts:
                waker = (_pgbench(args.pgbench, url, wake, args.app_processes, args.seconds,
                                  rate=wake_rate) if kind == "enqueue, after-commit" else None)
                rates[kind].append(_tps(_pgbench(args.pgbench, url, paths[kind], args.clients,
                                                 args.seconds)))
                if waker is not None:
                    wakes.append(_tps(waker))
                print(f"round {r + 1}: {kind:<26}{rates[kind][-1]:>9.0f} tps", flush=True)
            load.append(os.getloadavg()[0])
    print(f"\n{args.clients} connections, {args.seconds:.0f} s per kind and round, "
          f"{args.rounds} rounds interleaved; pgbench {args.pgbench}; load average (1 min) "
          f"{', '.join(f'{x:.1f}' for x in load)}")
    print(f"after-commit wake-ups meanwhile: {args.app_processes} connections at "
          f"{wake_rate:.0f}/s at most, sent {statistics.median(wakes):.0f}/s (median)")
    bare = statistics.median(rates["bare"])
    print(f"{'business transaction + outbox row':<36}{'tps':>9}{'x bare':>9}   rounds")
    for kind, xs in rates.items():
        ratio = statistics.median(xs) / bare
        print(f"{kind:<36}{statistics.median(xs):>9.0f}{ratio:>9.2f}   "
              f"{', '.join(f'{x:.0f}' for x in xs)}")
    ratio = statistics.median(rates["enqueue, after-commit"]) / bare
    print(f"default (after-commit) is {ratio:.2f}x bare: "
          f"{'meets' if ratio >= TARGET else 'MISSES'} the >= {TARGET}x target")


if __name__ == "__main__":
    main()
