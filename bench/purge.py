"""Purge while draining: does a worker's drain rate hold while history is purged?

A scratch database of the benchmark server (bench/common.py) gets ``--history`` old
``sent`` rows, each with its attempt row, and a backlog of ``-n`` template messages.
One ``mailout worker`` drains the backlog into Postfix's ``smtp-sink`` while this
process switches a purge (``purging.purge_in_batches``, what ``mailout purge`` runs,
with ``--batch`` and ``--pause``) on and off in alternating windows of ``--window``
seconds: quiet, purging, quiet, ..., quiet. The drain rate of each window comes from
the rows' ``sent_at`` (database clock), so quiet and purging windows see the same
table, the same worker and the same machine load, interleaved. Printed: the median
rate of each kind, and each purging window against the mean of the quiet windows
either side of it (their median), which cancels a drift over the run. ``--pause
0.25,0.5,0`` compares several pauses in one run: the purging windows take them in
turn.

Also per mode: CPU seconds per second of the worker process, of its PostgreSQL
backends, of the purge's backend and of the vacuum stand-in (``/proc``: the server
must run here), the machine's idle share, and what the worker's backends waited
on (``pg_stat_activity``, sampled every 50 ms): a lock wait there would mean the
purge blocks claims. And the purge's own figures: rows/s while on, the longest
batch transaction (how long it held its row locks), and the time 1,000,000 rows
would take at that pace.

    .venv/bin/python -m bench.purge [-n 200000] [--history 1000000] [--windows 11]
        [--window 6] [--batch 1000] [--pause 0.25[,0.5,0...]]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine, func, select, text

from bench.common import (
    scratch_database,
    smtp_sink,
    stand_in_autovacuum,
    worker_env,
    write_templates,
)
from bench.throughput import HISTORY_SQL, fill
from mailout import db
from mailout.db import migrate, purging
from mailout.db.schema import messages

ROLES = ("worker", "purge", "vacuum")
APP = {"worker": "bench-worker", "purge": "bench-purge", "vacuum": "bench-vacuum"}
# Each history row's attempt, as a worker logs a send.
ATTEMPTS_SQL = text("""
INSERT INTO mailout_attempts (outbox_id, attempt, outcome, stage, reply_code, reply_text,
    recipient, worker, started_at, finished_at, charged, transport)
SELECT id, 1, 'sent', 'data', 250, last_reply_text, recipient, 'history', finished_at,
    finished_at, true, 'smtp'
FROM mailout_messages WHERE status = 'sent'
""")


@dataclass(frozen=True)
class Plan:
    """What to measure: see the module docstring and ``--help``."""

    n: int = 200_000
    history: int = 1_000_000
    windows: int = 11
    window: float = 6.0
    warmup: float = 5.0  # worker start-up, and the drain settling after the fill
    batch: int = purging.DEFAULT_BATCH
    pauses: tuple[float, ...] = (purging.DEFAULT_PAUSE,)  # taken in turn by purging windows


Mode = float | None  # the purge's pause in a window; None: no purge (quiet)


@dataclass
class Result:
    windows: list[Window]
    waits: dict[Mode, Counter[str]]  # mode -> wait event -> samples
    vacuuming: bool  # the benchmark stood in for autovacuum


@dataclass
class Window:
    pause: Mode
    start: datetime  # database clock
    end: datetime | None = None
    sent: int = 0
    cpu: dict[str, float] = field(default_factory=dict)  # role -> CPU seconds
    idle: float = 0.0  # machine idle share
    purged: int = 0
    batches: int = 0
    longest_batch: float = 0.0
    in_batches: float = 0.0  # seconds inside batch transactions
    wal: float = 0.0  # bytes written, server-wide

    @property
    def purging(self) -> bool:
        return self.pause is not None

    @property
    def seconds(self) -> float:
        assert self.end is not None
        return (self.end - self.start).total_seconds()

    @property
    def rate(self) -> float:
        return self.sent / self.seconds


class Cpu:
    """CPU seconds of the worker process and of the database's backends by role
    (their application_name), read from /proc."""

    def __init__(self, engine: Engine, worker_pid: int) -> None:
        self.engine, self.worker_pid = engine, worker_pid
        self.pids: dict[int, str] = {}
        self.last: dict[int, float] = {}  # a backend that has gone keeps its last figure
        self.tick = os.sysconf("SC_CLK_TCK")

    def _proc(self, pid: int) -> float:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            return self.last.get(pid, 0.0)
        self.last[pid] = (int(fields[11]) + int(fields[12])) / self.tick
        return self.last[pid]

    def read(self) -> dict[str, float]:
        with self.engine.connect() as conn:
            for pid, app in conn.execute(text(
                    "SELECT pid, application_name FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()")):
                role = next((r for r, a in APP.items() if a == app), None)
                if role is not None:
                    self.pids[pid] = role
        out = dict.fromkeys(("worker process", *(f"{r} backends" for r in ROLES),
                             "this process (purge client)"), 0.0)
        out["worker process"] = self._proc(self.worker_pid)
        out["this process (purge client)"] = self._proc(os.getpid())
        for pid, role in self.pids.items():
            out[f"{role} backends"] += self._proc(pid)
        return out


def machine_idle() -> tuple[float, float]:
    """(idle, total) jiffies of the whole machine so far."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return float(values[3] + values[4]), float(sum(values))


def sample_waits(engine: Engine, stop: threading.Event, mode: list[Mode],
                 out: dict[Mode, Counter[str]]) -> None:
    """What the worker's active backends wait on, every 50 ms, by ``mode[0]``."""
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        while not stop.wait(0.05):
            rows = conn.execute(text(
                "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') "
                "FROM pg_stat_activity WHERE application_name = :app AND state = 'active'"),
                {"app": APP["worker"]}).scalars().all()
            counter = out.setdefault(mode[0], Counter())
            counter["samples"] += 1
            counter.update(rows)


def seed_history(engine: Engine, n: int) -> None:
    t0 = time.perf_counter()
    with engine.begin() as conn:
        conn.execute(HISTORY_SQL, {"n": n})  # finished 20 days ago and earlier
        conn.execute(ATTEMPTS_SQL)
    print(f"  ({n:,} sent rows and their attempts inserted in "
          f"{time.perf_counter() - t0:.0f} s)", flush=True)


def vacuum_analyze(engine: Engine) -> None:
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(text("VACUUM ANALYZE mailout_messages, mailout_attempts"))


class Purger:
    """A purge switched on and off: each on-window runs purge_in_batches in a thread
    until the window's stop event."""

    def __init__(self, url: str, batch: int) -> None:
        self.engine = db.make_engine(url, connect_args={"application_name": APP["purge"]})
        self.batch = batch
        self.thread: threading.Thread | None = None
        self.stop = threading.Event()
        self.result: purging.PurgeTotals | None = None

    def start(self, pause: float) -> None:
        self.stop = threading.Event()
        self.result = None

        def run() -> None:
            self.result = purging.purge_in_batches(
                self.engine, timedelta(days=10), ["sent"], batch=self.batch,
                pause=pause, stop=self.stop)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def finish(self) -> purging.PurgeTotals:
        assert self.thread is not None
        self.stop.set()
        self.thread.join()
        assert self.result is not None, "the purge thread failed"
        return self.result


def db_clock(engine: Engine) -> tuple[datetime, float]:
    """The database's clock, and its WAL position in bytes (server-wide)."""
    with engine.connect() as conn:
        moment, wal = conn.execute(text(
            "SELECT clock_timestamp(), pg_current_wal_lsn() - '0/0'::pg_lsn")).one()
    return moment, float(wal)


def count_sent(engine: Engine, start: datetime, end: datetime) -> int:
    with engine.connect() as conn:
        n: int = conn.execute(select(func.count()).where(
            messages.c.status == "sent", messages.c.sent_at >= start,
            messages.c.sent_at < end)).scalar_one()
    return n


def measure(engine: Engine, url: str, env: dict[str, str], templates: Path,
            plan: Plan) -> Result:
    """Seed the history and the backlog in the (migrated, empty) database of
    ``engine``, then drain with the purge switched on and off."""
    print(f"history of {plan.history:,} rows, backlog of {plan.n:,}...", flush=True)
    seed_history(engine, plan.history)
    fill(engine, plan.n, templates, "drain")
    vacuum_analyze(engine)
    waits: dict[Mode, Counter[str]] = {}
    with stand_in_autovacuum(url, application_name=APP["vacuum"]) as vacuuming:
        windows = run_windows(engine, url, env, plan, waits)
    return Result(windows, waits, vacuuming)


def run_windows(engine: Engine, url: str, env: dict[str, str], args: Plan,
                waits: dict[Mode, Counter[str]]) -> list[Window]:
    errors = tempfile.TemporaryFile()  # noqa: SIM115  # closed in the finally below
    worker = subprocess.Popen([sys.executable, "-m", "mailout", "worker", "--until-idle"],
                              env={**env, "PGAPPNAME": APP["worker"]},
                              stdout=subprocess.DEVNULL, stderr=errors)
    purger = Purger(url, args.batch)
    cpu = Cpu(engine, worker.pid)
    stop_sampling = threading.Event()
    mode: list[Mode] = [None]  # what the current window does, for the sampler
    sampler = threading.Thread(target=sample_waits,
                               args=(engine, stop_sampling, mode, waits), daemon=True)
    windows: list[Window] = []
    try:
        time.sleep(args.warmup)  # imports, connections, the first claims
        sampler.start()
        for i in range(args.windows):
            if worker.poll() is not None:
                if worker.returncode:
                    errors.seek(0)
                    tail = errors.read().decode(errors="replace")[-3000:]
                    raise RuntimeError(f"worker exited with {worker.returncode}:\n{tail}")
                print("  (the backlog ran out: raise -n)", flush=True)
                break
            pause = args.pauses[i // 2 % len(args.pauses)] if i % 2 else None
            start, wal0 = db_clock(engine)
            window = Window(pause, start)
            before, idle0 = cpu.read(), machine_idle()
            if pause is not None:
                mode[0] = pause
                purger.start(pause)
            time.sleep(args.window)
            if pause is not None:
                totals = purger.finish()
                mode[0] = None
                window.purged, window.batches = totals.messages, totals.batches
                window.longest_batch = totals.longest_batch
                window.in_batches = totals.in_batches
            window.end, wal1 = db_clock(engine)
            window.wal = wal1 - wal0
            after, idle1 = cpu.read(), machine_idle()
            window.cpu = {k: after[k] - before[k] for k in after}
            window.idle = (idle1[0] - idle0[0]) / max(1.0, idle1[1] - idle0[1])
            windows.append(window)
            print(f"  window {i + 1}: {'quiet' if pause is None else f'pause {pause}':<10} "
                  f"{window.seconds:.1f} s", flush=True)
    finally:
        stop_sampling.set()
        worker.terminate()
        worker.wait(30)
        errors.close()
        purger.engine.dispose()
    for window in windows:
        assert window.end is not None
        window.sent = count_sent(engine, window.start, window.end)
    return windows


def report(result: Result, args: Plan) -> None:
    windows = result.windows
    if result.vacuuming:
        print("(the server runs without autovacuum: the outbox table was vacuumed and "
              "analyzed every 5 s instead, by the 'vacuum' backend)")
    quiet = [w for w in windows if not w.purging]
    modes = sorted({w.pause for w in windows if w.pause is not None})
    if not quiet or not modes:
        print("not enough windows")
        return
    print("\nper window (msg/s): " + ", ".join(
        f"{'q' if w.pause is None else f'P{w.pause}'} {w.rate:.0f}" for w in windows))
    q_rate = statistics.median(w.rate for w in quiet)
    print(f"drain rate, median of {len(quiet)} quiet windows: {q_rate:.0f} msg/s")
    for pause in modes:
        _report_purge(windows, pause, q_rate, args.batch)
    _report_resources(result, [None, *modes])
    print(f"(load average {os.getloadavg()[0]:.1f})")


def _neighbour_ratios(windows: list[Window], pause: float) -> list[float]:
    """Each window purging at ``pause`` against the quiet windows either side of it:
    the drain slows as the run goes on (the table grows, other jobs come and go), and
    a window compared with its own neighbours carries none of that trend."""
    ratios = []
    for i, w in enumerate(windows):
        neighbours = [n.rate for n in windows[max(0, i - 1):i + 2] if not n.purging]
        if w.pause == pause and neighbours:
            ratios.append(w.rate / statistics.mean(neighbours))
    return ratios


def _report_purge(windows: list[Window], pause: float, q_rate: float, batch: int) -> None:
    busy = [w for w in windows if w.pause == pause]
    p_rate = statistics.median(w.rate for w in busy)
    ratios = _neighbour_ratios(windows, pause)
    print(f"\npurge with pause {pause} s: drain rate, median of {len(busy)} windows, "
          f"{p_rate:.0f} msg/s ({p_rate / q_rate:.0%} of quiet); against their quiet "
          f"neighbours {', '.join(f'{r:.0%}' for r in ratios)}: "
          f"median {statistics.median(ratios):.0%}")
    purged, batches = sum(w.purged for w in busy), sum(w.batches for w in busy) or 1
    pace = purged / sum(w.seconds for w in busy)
    print(f"  {purged:,} rows in {batches} batches of up to {batch}, {pace:,.0f} rows/s "
          f"(1,000,000 rows in {1e6 / max(pace, 1) / 60:.0f} min); batch transactions "
          f"{sum(w.in_batches for w in busy) / batches * 1000:.0f} ms on average, the "
          f"longest {max(w.longest_batch for w in busy) * 1000:.0f} ms")


def _report_resources(result: Result, modes: list[Mode]) -> None:
    windows = result.windows
    by_mode = {m: [w for w in windows if w.pause == m] for m in modes}
    seconds = {m: sum(w.seconds for w in ws) for m, ws in by_mode.items()}
    labels = ["quiet" if m is None else f"P{m}" for m in modes]
    print(f"\n{'per second of each kind of window:':<40}{''.join(f'{x:>9}' for x in labels)}")
    for key in windows[0].cpu:
        print(f"  {key + ' (CPU s)':<38}" + "".join(
            f"{sum(w.cpu[key] for w in by_mode[m]) / seconds[m]:>9.2f}" for m in modes))
    print(f"  {'WAL MB (server-wide)':<38}" + "".join(
        f"{sum(w.wal for w in by_mode[m]) / seconds[m] / 1e6:>9.2f}" for m in modes))
    print(f"  {'machine idle share':<38}" + "".join(
        f"{statistics.mean(w.idle for w in by_mode[m]):>9.0%}" for m in modes))
    print("worker backends' waits (share of their active samples):")
    for m, label in zip(modes, labels, strict=True):
        counter = result.waits.get(m, Counter())
        total = sum(v for k, v in counter.items() if k != "samples") or 1
        top = ", ".join(f"{k} {v / total:.0%}" for k, v in counter.most_common(6)
                        if k != "samples")
        locks = sum(v for k, v in counter.items() if k.startswith("Lock:"))
        print(f"  {label:<7} {top}; heavyweight lock waits {locks / total:.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = Plan()
    ap.add_argument("-n", type=int, default=default.n,
                    help=f"backlog to drain: enough for every window (default {default.n})")
    ap.add_argument("--history", type=int, default=default.history)
    ap.add_argument("--windows", type=int, default=default.windows,
                    help=f"windows in all, quiet first and last (default {default.windows})")
    ap.add_argument("--window", type=float, default=default.window,
                    help="seconds per window")
    ap.add_argument("--warmup", type=float, default=default.warmup)
    ap.add_argument("--batch", type=int, default=default.batch)
    ap.add_argument("--pause", default=",".join(map(str, default.pauses)),
                    help="the purge's pause; several (0.25,0.5) are taken in turn by the "
                         "purging windows, to compare them in one run")
    ap.add_argument("--concurrency", type=int, default=20)
    args = ap.parse_args()
    plan = Plan(args.n, args.history, args.windows, args.window, args.warmup, args.batch,
                tuple(float(p) for p in args.pause.split(",")))
    with tempfile.TemporaryDirectory() as tmp, scratch_database() as url, smtp_sink() as port:
        templates = write_templates(Path(tmp))
        engine = db.make_engine(url)
        migrate.upgrade(engine)
        env = worker_env(url, port, templates, args.concurrency)
        result = measure(engine, url, env, templates, plan)
        engine.dispose()
    report(result, plan)


if __name__ == "__main__":
    main()

