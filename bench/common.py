"""Shared pieces for the benchmarks: a PostgreSQL database and an smtp-sink server.

PostgreSQL comes from MAILOUT_BENCH_POSTGRES_URL, else MAILOUT_TEST_POSTGRES_URL,
else the local service at 127.0.0.1:5432 (the machine's default).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from sqlalchemy.engine import make_url

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


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
