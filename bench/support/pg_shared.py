"""One embedded PostgreSQL server per test run, shared by the run's processes.

Without ``MAILOUT_TEST_POSTGRES_URL`` the tests start a server of their own
(:class:`bench.support.pg.EmbeddedPostgres`). Under pytest-xdist each worker is a
process with its own session fixtures, so a server per session would mean four
``initdb`` runs racing each other, and four servers, for one run. Instead the run's
processes share one, through a registry file under one machine-wide lock:

* a process that needs the server takes the lock; if the registry holds a live server
  for its run, it adds its pid to that server's users, otherwise it starts one and
  records it with itself as the only user;
* a process that is done takes the lock and removes itself; the last user stops the
  server and deletes its files.

A run is named by ``PYTEST_XDIST_TESTRUNUID``, which xdist gives every worker of one
run (a plain ``pytest`` is a run of one process, named by its pid). A user that died
without leaving (SIGKILL, a crashed xdist worker) is pruned by pid on every visit, so
its server is stopped by the last live user, or, if none is left, by the next run on
the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from bench.support.pg import EmbeddedPostgres, file_lock

RUN_ID_VAR = "PYTEST_XDIST_TESTRUNUID"
# Per user: a server started by root runs as another user, and only its starter may stop it.
REGISTRY = Path(tempfile.gettempdir()) / f"mailout-pg-runs-{os.geteuid()}.json"
LOCK = REGISTRY.with_suffix(".lock")

Registry = dict[str, dict[str, Any]]  # run id -> {"url", "dir", "users": [pid, ...]}


@contextmanager
def shared_embedded_server(run_id: str | None = None) -> Iterator[str]:
    """The URL of this run's embedded server, started if no live one exists yet."""
    run = run_id or os.environ.get(RUN_ID_VAR) or f"pid-{os.getpid()}"
    url = _join(run)
    try:
        yield url
    finally:
        _leave(run)


def _join(run: str) -> str:
    with file_lock(LOCK):
        registry = _prune(_read())
        entry = registry.get(run)
        if entry is not None and not (Path(entry["dir"]) / "data" / "postmaster.pid").exists():
            shutil.rmtree(entry["dir"], ignore_errors=True)  # it died: start another
            entry = None
        if entry is None:
            entry = registry[run] = _start()
        entry["users"].append(os.getpid())
        _write(registry)
        return str(entry["url"])


def _start() -> dict[str, Any]:
    server = EmbeddedPostgres()
    try:
        url = server.start(stop_at_exit=False)  # its last user stops it, not its first
    except BaseException:
        server.stop()
        raise
    return {"url": url, "dir": str(server.data_dir.parent), "users": []}


def _leave(run: str) -> None:
    with file_lock(LOCK):
        registry = _read()
        entry = registry.get(run)
        if entry is not None:
            entry["users"] = [pid for pid in entry["users"] if pid != os.getpid()]
        _write(_prune(registry))


def _prune(registry: Registry) -> Registry:
    """Drop dead users; stop and delete each server with no live user left."""
    kept: Registry = {}
    for run, entry in registry.items():
        entry["users"] = [pid for pid in entry["users"] if _alive(pid)]
        if entry["users"]:
            kept[run] = entry
            continue
        directory = Path(entry["dir"])
        if directory.exists():
            # A server that died with its run leaves a stale postmaster.pid that
            # pg_ctl cannot stop; its files go all the same.
            with suppress(RuntimeError, OSError):
                EmbeddedPostgres.adopt(directory, entry["url"]).stop()
        shutil.rmtree(directory, ignore_errors=True)
    return kept


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def _read() -> Registry:
    with suppress(FileNotFoundError, ValueError):
        loaded = json.loads(REGISTRY.read_text())
        if isinstance(loaded, dict):
            return loaded
    return {}


def _write(registry: Registry) -> None:
    if not registry:
        REGISTRY.unlink(missing_ok=True)
        return
    partial = REGISTRY.with_suffix(".tmp")
    partial.write_text(json.dumps(registry))
    partial.replace(REGISTRY)
