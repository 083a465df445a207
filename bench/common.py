"""Shared pieces for the benchmarks: a PostgreSQL database and an smtp-sink server.

PostgreSQL comes from MAILOUT_BENCH_POSTGRES_URL, else MAILOUT_TEST_POSTGRES_URL,
else the local service at 127.0.0.1:5432 (the machine's default). MariaDB/MySQL, for
the benchmarks that compare stores, from MAILOUT_BENCH_MYSQL_URL, else
MAILOUT_TEST_MYSQL_URL, else 127.0.0.1:3306 as root.
"""

from __future__ import annotations

import compileall
import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import psycopg
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

import mailout
from mailout import db

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_MYSQL = "mysql://root@127.0.0.1:3306/test"


def pg_server_url() -> str:
    return (os.environ.get("MAILOUT_BENCH_POSTGRES_URL")
            or os.environ.get("MAILOUT_TEST_POSTGRES_URL") or DEFAULT_PG)


@contextmanager
def scratch_database() -> Iterator[str]:
    """A fresh, empty database on the benchmark server, dropped afterwards."""
    server = make_url(pg_server_url())
    name = f"mailout_bench_{uuid.uuid4().hex[:8]}"
    admin = server.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def mysql_server_url() -> str:
    return db.database_url(os.environ.get("MAILOUT_BENCH_MYSQL_URL")
                           or os.environ.get("MAILOUT_TEST_MYSQL_URL") or DEFAULT_MYSQL)


@contextmanager
def scratch_mysql_database() -> Iterator[str]:
    """A fresh, empty database on the MariaDB/MySQL benchmark server, dropped afterwards."""
    server = mysql_server_url()
    name = f"mailout_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE `{name}`"))
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
        admin.dispose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def smtp_sink() -> Iterator[int]:
    """Postfix's smtp-sink on a free loopback port, as the issues prescribe."""
    exe = shutil.which("smtp-sink") or "/usr/sbin/smtp-sink"
    port = free_port()
    proc = subprocess.Popen([exe, "-u", "postfix", f"127.0.0.1:{port}", "1000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(5)


# -- shared by the throughput benchmark -------------------------------------------

BENCH_SETTINGS_DOMAIN = "shop.example.com"
MAIL_FROM = "Shop <shop@example.com>"
TEMPLATE = "order_confirmation"
# About 2 KB each once rendered, as the issue prescribes.
TEXT = "Hello {{ name }},\n\nThank you for order {{ order_id }}.\n" + "Line of text. " * 140
HTML = "<p>Hello {{ name }},</p><p>Thank you for order {{ order_id }}.</p>" + (
    "<p>Some <b>HTML</b> content.</p>" * 60
)
SHORT_SUBJECT = "Your sign-in code"


def short_text(i: int) -> str:
    """The short message's body: one line of text, no HTML, no template."""
    return f"Your sign-in code is {i % 1_000_000:06d}. It expires in 10 minutes.\n"


class Body(StrEnum):
    """Which message a benchmark drains (the issue sets a CPU target for each)."""

    TEMPLATE = "template"  # the template above: subject, ~2 KB text, ~2 KB HTML
    SHORT = "short"  # a subject and one line of text given at enqueue, no template


def write_templates(root: Path) -> Path:
    """The benchmark's template (subject, text and HTML parts) under ``root``."""
    folder = root / TEMPLATE
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "subject.txt").write_text("Your order {{ order_id }} is confirmed")
    (folder / "text.txt").write_text(TEXT)
    (folder / "html.html").write_text(HTML)
    return root


def params(i: int) -> dict[str, object]:
    return {"name": f"Customer {i}", "order_id": i}


def worker_env(url: str, port: int, templates: Path, concurrency: int) -> dict[str, str]:
    """The environment of a ``mailout worker`` draining into smtp-sink."""
    return {**os.environ, "MAILOUT_DATABASE_URL": url, "MAIL_FROM": MAIL_FROM,
            "SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(port), "SMTP_TLS": "none",
            "MAILOUT_TEMPLATES": str(templates), "MAILOUT_CONCURRENCY": str(concurrency)}


@dataclass(frozen=True)
class WorkerRun:
    """What ``mailout worker --until-idle`` processes took: from wait4, so each figure is
    the worker's own, not the largest child's of this process's life."""

    wall: float  # seconds from the first start to the last exit
    started_at: float  # time.time() just before the first start
    peak_kb: list[int]  # each process's peak RSS
    cpu: list[float]  # each process's user + system CPU seconds


def compile_sources(env: dict[str, str]) -> None:
    """Byte-compile the mailout package the workers of ``env`` import (its PYTHONPATH,
    else this one), as an installed package is: with PYTHONDONTWRITEBYTECODE set (as
    on some CI machines) every worker would otherwise compile mailout's modules from
    source at each start (about 0.15 s here), a cost no deployment pays and the peers,
    installed by pip, do not pay either."""
    roots = [Path(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    package = next((r / "mailout" for r in roots if (r / "mailout").is_dir()),
                   Path(mailout.__file__).parent)
    compileall.compile_dir(package, quiet=1)


def run_workers(env: dict[str, str], processes: int) -> WorkerRun:
    """Start ``processes`` ``mailout worker --until-idle`` together and wait for all
    (their sources byte-compiled first: :func:`compile_sources`)."""
    compile_sources(env)
    command = [sys.executable, "-m", "mailout", "worker", "--until-idle"]
    with tempfile.TemporaryFile() as errors:
        started_at = time.time()
        t0 = time.perf_counter()
        procs = [subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=errors)
                 for _ in range(processes)]
        peaks: list[int] = []
        cpu: list[float] = []
        failed = []
        for proc in procs:
            _pid, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            peaks.append(usage.ru_maxrss)
            cpu.append(usage.ru_utime + usage.ru_stime)
            if proc.returncode != 0:
                failed.append(proc.returncode)
        elapsed = time.perf_counter() - t0
        if failed:
            errors.seek(0)
            tail = errors.read().decode(errors="replace")[-3000:]
            raise RuntimeError(f"worker exited with {failed}:\n{tail}")
    return WorkerRun(elapsed, started_at, peaks, cpu)


@contextmanager
def stand_in_autovacuum(url: str, every: float = 5.0,
                        application_name: str = "mailout-bench-vacuum") -> Iterator[bool]:
    """VACUUM and ANALYZE the outbox table every ``every`` seconds meanwhile, as
    autovacuum would, if the server runs without autovacuum (this machine's test server
    does); yields whether it does.

    Each send leaves dead row versions behind in the claim's indexes; without vacuum
    they pile up and every claim walks past them (a 50,000-message backlog made
    claims take 30 ms here). Without statistics that know the backlog, the planner
    may sort a lane's backlog at every claim instead of reading its claim index in
    order (docs/capacity.md). The capacity document gives the per-table autovacuum
    settings a deployment should use.
    """
    admin = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        off = conn.execute("SHOW autovacuum").fetchone() == ("off",)
    if not off:
        yield False
        return
    stop = threading.Event()

    def loop() -> None:
        # Named, so that a benchmark can tell its backend's CPU from the others'.
        with psycopg.connect(admin, autocommit=True, application_name=application_name) as conn:
            while not stop.wait(every):
                with contextlib.suppress(psycopg.errors.UndefinedTable):  # not migrated yet
                    conn.execute("VACUUM (ANALYZE) mailout_messages")

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield True
    finally:
        stop.set()
        thread.join(60)


_COLLECTED = re.compile(r"Collected : (\d+)")


def callgrind(args: list[str], env: dict[str, str], out: Path) -> int:
    """Instructions of ``python *args`` run to its end under ``valgrind --tool=callgrind``
    (profile written to ``out``): a count the machine's load does not move."""
    with tempfile.TemporaryFile() as err:
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        sys.executable, *args],
                       env=env, stdout=subprocess.DEVNULL, stderr=err, check=True)
        err.seek(0)
        found = _COLLECTED.search(err.read().decode(errors="replace"))
    if found is None:
        raise RuntimeError("valgrind printed no instruction count")
    return int(found.group(1))
