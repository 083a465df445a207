"""A real PgBouncer in transaction mode in front of the test PostgreSQL.

``pgbouncer_in_front(server_url)`` starts Debian's ``/usr/sbin/pgbouncer`` on a free
loopback port with a small server pool (:data:`POOL_SIZE`), every database forwarded
to the server of ``server_url``, and yields the URL that reaches ``database`` through
it. PgBouncer refuses to run as root, so as root it runs as ``postgres`` (Debian's
PostgreSQL user) or the embedded server's user. Without the binary the caller skips,
saying why (:func:`binary`).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from bench.support.pg import SERVER_USER, ensure_system_user
from sqlalchemy.engine import make_url

POOL_SIZE = 4  # server connections per database/user pair: fewer than the clients
READY_SECONDS = 30.0
SKIP_REASON = "pgbouncer is not installed (Debian: apt-get install pgbouncer)"


def binary() -> str | None:
    """The pgbouncer executable, or None."""
    return shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None)


def _run_as() -> int | None:
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres").pw_uid
    except KeyError:
        return ensure_system_user(SERVER_USER)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(directory: Path, server_url: str, port: int) -> Path:
    server = make_url(server_url)
    target = f"host={server.host or '127.0.0.1'} port={server.port or 5432} " \
             f"user={server.username or 'postgres'}"
    if server.password:
        target += f" password={server.password}"
    path = directory / "pgbouncer.ini"
    path.write_text(f"""[databases]
* = {target}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = {POOL_SIZE}
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 500
ignore_startup_parameters = extra_float_digits,options
logfile = {directory / 'pgbouncer.log'}
pidfile = {directory / 'pgbouncer.pid'}
""")
    return path


class PgBouncer:
    """One running PgBouncer; :attr:`port` is where clients connect."""

    def __init__(self, server_url: str) -> None:
        exe = binary()
        if exe is None:
            raise RuntimeError(SKIP_REASON)
        self.server_url = server_url
        self.dir = Path(tempfile.mkdtemp(prefix="mailout-pgbouncer-"))
        self.port = _free_port()
        config = _config(self.dir, server_url, self.port)
        uid = _run_as()
        if uid is not None:
            os.chown(self.dir, uid, -1)
            os.chown(config, uid, -1)
        self.proc = subprocess.Popen([exe, str(config)], user=uid, cwd=self.dir,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def url(self, database_url: str) -> str:
        """``database_url`` (a database on the server) as reached through PgBouncer."""
        return make_url(database_url).set(host="127.0.0.1", port=self.port) \
            .render_as_string(hide_password=False)

    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_ready(self, database_url: str) -> None:
        """Until a query through PgBouncer reaches the server (or it died, or
        :data:`READY_SECONDS` passed: then fail with its log)."""
        libpq = make_url(self.url(database_url)).set(drivername="postgresql") \
            .render_as_string(hide_password=False)
        deadline = time.monotonic() + READY_SECONDS
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited ({self.proc.returncode}):\n{self.log()}")
            try:
                with psycopg.connect(libpq, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer not ready:\n{self.log()[-2000:]}") from None
                time.sleep(0.05)  # between readiness checks

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextmanager
def pgbouncer_in_front(server_url: str, database_url: str) -> Iterator[PgBouncer]:
    """A ready PgBouncer forwarding to ``server_url``'s server, stopped afterwards."""
    bouncer = PgBouncer(server_url)
    try:
        bouncer.wait_ready(database_url)
        yield bouncer
    finally:
        bouncer.stop()
