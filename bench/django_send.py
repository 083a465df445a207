"""send_mail() through mailout's Django backend vs Django's SMTP backend, per call.

Both end at Postfix's smtp-sink: Django's SMTP backend sends inline (connect, EHLO,
MAIL, RCPT, DATA, QUIT in the call), mailout's backend writes the outbox row on
Django's connection and a ``mailout worker`` (the process ``manage.py mailout
worker`` runs), started before the timing, sends it. Two situations:

- ``send_mail()`` alone, in Django's autocommit: the backend's call includes the
  commit of its own transaction (on PostgreSQL, a WAL flush);
- a view's transaction: ``atomic()`` around an order INSERT and ``send_mail()``,
  timed as a whole: the commit is paid for the order either way.

The kinds alternate in blocks so that drift in the machine's speed hits all alike.
After the timing the worker drains what is left, and every queued message must
have reached smtp-sink (status sent), or the run fails.

    .venv/bin/python -m bench.django_send [--calls 2000] [--database postgresql|sqlite|both]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from bench.common import MAIL_FROM, scratch_database, smtp_sink

BODY = "Thank you for your order.\n" + "Line of text. " * 140  # about 2 KB


def _django_databases(url: str) -> dict[str, Any]:
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": u.database}
    return {"ENGINE": "django.db.backends.postgresql", "NAME": u.database,
            "USER": u.username or "", "PASSWORD": u.password or "", "HOST": u.host or "",
            "PORT": str(u.port or "")}


def _configure(url: str, port: int) -> None:
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth",
                        "mailout.contrib.django"],
        DATABASES={"default": _django_databases(url)}, USE_TZ=True,
        EMAIL_HOST="127.0.0.1", EMAIL_PORT=port, DEFAULT_FROM_EMAIL=MAIL_FROM)
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


@contextmanager
def _worker(url: str, port: int) -> Iterator[None]:
    env = {**os.environ, "MAILOUT_DATABASE_URL": url, "MAIL_FROM": MAIL_FROM,
           "SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(port), "SMTP_TLS": "none"}
    proc = subprocess.Popen([sys.executable, "-m", "mailout", "worker"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    subprocess.run([sys.executable, "-m", "mailout", "worker", "--until-idle"], env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)


def _timed(send: Callable[[int], None], first: int, count: int) -> list[float]:
    out = []
    for i in range(first, first + count):
        t0 = time.perf_counter()
        send(i)
        out.append(time.perf_counter() - t0)
    return out


def run(url: str, calls: int, block: int) -> dict[str, list[float]]:
    from django.core.mail import get_connection, send_mail

    smtp = get_connection("django.core.mail.backends.smtp.EmailBackend")
    outbox = get_connection("mailout.contrib.django.EmailBackend")

    def via(connection: Any) -> Callable[[int], None]:
        def send(i: int) -> None:
            send_mail(f"Order {i}", BODY, None, [f"customer{i}@example.com"],
                      connection=connection)
        return send

    from django.db import connection, transaction

    with connection.cursor() as cur:
        cur.execute("CREATE TABLE bench_orders (id integer PRIMARY KEY, email varchar(320))")

    def in_order(send: Callable[[int], None]) -> Callable[[int], None]:
        def place(i: int) -> None:
            with transaction.atomic(), connection.cursor() as cur:
                cur.execute("INSERT INTO bench_orders VALUES (%s, %s)",
                            [i, f"customer{i}@example.com"])
                send(i)
        return place

    kinds = {"send_mail(), Django SMTP backend": via(smtp),
             "send_mail(), mailout backend": via(outbox),
             "order + send_mail(), SMTP backend": in_order(via(smtp)),
             "order + send_mail(), mailout backend": in_order(via(outbox))}
    times: dict[str, list[float]] = {k: [] for k in kinds}
    n = 0
    for _ in range(2):  # warm-up: connections, statement caches, the dialect
        for send in kinds.values():
            _timed(send, n, 50)
            n += 50
    for _ in range(calls // block):
        for name, send in kinds.items():
            times[name] += _timed(send, n, block)
            n += block
    return times


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000)[int(q * 1000) - 1] * 1000


def _sent(url: str) -> tuple[int, int]:
    from sqlalchemy import func, select

    from mailout import db
    from mailout.db.schema import messages

    engine = db.make_engine(url)
    with engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(messages)).scalar_one()
        sent = conn.execute(select(func.count()).select_from(messages)
                            .where(messages.c.status == "sent")).scalar_one()
    engine.dispose()
    return int(total), int(sent)


def bench_one(url: str, calls: int, block: int, label: str) -> None:
    with smtp_sink() as port:
        _configure(url, port)
        with _worker(url, port):
            times = run(url, calls, block)
        total, sent = _sent(url)
    if sent != total:
        raise SystemExit(f"only {sent} of {total} queued messages reached smtp-sink")
    print(f"\n{label}: {calls} calls of each kind, ~2 KB text; the worker ran meanwhile "
          f"and delivered all {sent} queued messages to smtp-sink")
    print(f"{'per call':38} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    for name, values in times.items():
        print(f"{name:38} {_pct(values, 0.5):8.3f} {_pct(values, 0.99):8.3f} "
              f"{statistics.fmean(values) * 1000:8.3f}")
    alone_smtp, alone_outbox, order_smtp, order_outbox = times.values()
    for what, smtp, outbox in (("alone", alone_smtp, alone_outbox),
                               ("in a view's transaction", order_smtp, order_outbox)):
        print(f"mailout / SMTP {what}: p50 {_pct(outbox, 0.5) / _pct(smtp, 0.5):.2f}x, "
              f"p99 {_pct(outbox, 0.99) / _pct(smtp, 0.99):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--database", choices=["postgresql", "sqlite", "both"],
                        default="postgresql")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one database per process
    args = parser.parse_args()
    if args.child:
        bench_one(args.child, args.calls, args.block, make_url(args.child).get_backend_name())
        return
    # Django is configured once per process: each database runs in a process of its own.
    wanted = ["postgresql", "sqlite"] if args.database == "both" else [args.database]
    for kind in wanted:
        with _database(kind) as url:
            subprocess.run([sys.executable, "-m", "bench.django_send", "--calls",
                            str(args.calls), "--block", str(args.block), "--child", url],
                           check=True)


@contextmanager
def _database(kind: str) -> Iterator[str]:
    if kind == "postgresql":
        with scratch_database() as url:
            yield url
        return
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite:///{Path(tmp) / 'bench.db'}"


if __name__ == "__main__":
    main()
