"""The embedded PostgreSQL of the test suite, raced by real processes as xdist races it.

Without MAILOUT_TEST_POSTGRES_URL every xdist worker asks for a server at the same
moment; these tests start several processes on the same path at once and check that
they share one server, that its last user (or the next one, after a SIGKILL) stops
it, and that the system user it runs as is created once.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from bench.support import pg_shared
from bench.support.pg import ensure_system_user

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # initdb and a server start: seconds

# Each child: join the run's server, report what it got, hold it until told to go.
SHARE = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import psycopg
    from bench.support.pg_shared import shared_embedded_server
    run, go = sys.argv[1], Path(sys.argv[2])
    with shared_embedded_server(run) as url:
        libpq = url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(libpq) as conn:
            row = conn.execute("SELECT current_setting('data_directory'),"
                               " pg_postmaster_start_time()::text").fetchone()
        print(json.dumps({"url": url, "data": row[0], "started": row[1]}), flush=True)
        while not go.exists():
            time.sleep(0.01)
""")
USER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from bench.support.pg import ensure_system_user
    name, go = sys.argv[1], Path(sys.argv[2])
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.001)
    print(ensure_system_user(name), flush=True)
""")


def _children(script: str, n: int, *args: str) -> list[subprocess.Popen[str]]:
    env = {k: v for k, v in os.environ.items() if k != "MAILOUT_TEST_POSTGRES_URL"}
    env["PYTHONPATH"] = str(ROOT)
    return [subprocess.Popen([sys.executable, "-c", script, *args], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(n)]


@pytest.fixture
def run_id() -> Iterator[str]:
    run = f"test-{uuid.uuid4().hex}"
    yield run
    with pg_shared.file_lock(pg_shared.LOCK):  # whatever a failed test left running
        registry = pg_shared._read()
        for pid in registry.get(run, {}).get("users", []):
            os.kill(pid, signal.SIGKILL)
    pg_shared._leave(run)


def test_racing_processes_share_one_server_and_the_last_one_stops_it(
    run_id: str, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    children = _children(SHARE, 4, run_id, str(go))
    try:
        reports = [json.loads(child.stdout.readline() or "null")  # type: ignore[union-attr]
                   for child in children]
        assert None not in reports, [c.stderr.read() for c in children]  # type: ignore[union-attr]
        assert len({(r["url"], r["data"], r["started"]) for r in reports}) == 1
        assert sorted(pg_shared._read()[run_id]["users"]) == sorted(c.pid for c in children)
    finally:
        go.touch()
        for child in children:
            child.wait(60)
    assert [child.returncode for child in children] == [0] * 4
    assert run_id not in pg_shared._read()
    assert not Path(reports[0]["data"]).exists()  # stopped and deleted
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(reports[0]["url"].replace("+psycopg", ""), connect_timeout=2)


def test_a_killed_user_does_not_keep_the_server_alive(run_id: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    children = _children(SHARE, 3, run_id, str(go))
    reports = [json.loads(child.stdout.readline() or "null")  # type: ignore[union-attr]
               for child in children]
    assert None not in reports, [c.stderr.read() for c in children]  # type: ignore[union-attr]
    children[0].send_signal(signal.SIGKILL)  # never leaves
    children[0].wait(10)
    go.touch()
    for child in children[1:]:
        assert child.wait(60) == 0
    assert run_id not in pg_shared._read()
    assert not Path(reports[0]["data"]).exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="creates a system user: root only")
def test_racing_processes_create_the_system_user_once(tmp_path: Path) -> None:
    name = f"mo_t{uuid.uuid4().hex[:8]}"
    go = tmp_path / "go"
    children = _children(USER, 6, name, str(go))
    try:
        for child in children:  # all started, all waiting for the same file
            assert child.stdout.readline() == "ready\n"  # type: ignore[union-attr]
        go.touch()
        uids = [int(child.communicate(timeout=60)[0] or -1) for child in children]
        entry = pwd.getpwnam(name)
        assert uids == [entry.pw_uid] * 6
        lines = [line for line in Path("/etc/passwd").read_text().splitlines()
                 if line.startswith(f"{name}:")]
        assert len(lines) == 1
        assert ensure_system_user(name) == entry.pw_uid  # idempotent
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)
