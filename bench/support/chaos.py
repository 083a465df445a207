"""The chaos run: many messages, killed workers, a faulty provider, an outage and a
database restart; then every row is checked against what the server received.

Used by ``bench/chaos.py`` (the full run) and ``tests/integration/worker/test_chaos.py``
(a reduced run in CI).
"""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import func, select

from bench.support.pg import EmbeddedPostgres, create_database
from bench.support.smtpserver import Fault, SmtpTestServer
from bench.support.workers import spawn_worker, worker_env
from mailout import db
from mailout.db import migrate
from mailout.db.schema import attempts, messages
from mailout.outbox import EnqueueSettings, Message, enqueue_many
from mailout.transports.smtp.outcome import Stage


@dataclass(frozen=True)
class ChaosConfig:
    messages: int = 10_000
    workers: int = 4
    concurrency: int = 8
    p_transient: float = 0.10  # 451 at RCPT
    p_permanent: float = 0.02  # 550 at RCPT
    p_drop_before_dot: float = 0.03
    p_drop_after_dot: float = 0.02
    p_timeout: float = 0.02  # reply after the client's timeout
    outage_at: float = 5.0  # seconds into the run
    outage_seconds: float = 20.0
    kill_every: float = 2.0
    # SIGKILLs in all (None: until the queue is done). A bounded number lets a run on a
    # loaded machine finish however slowly its workers start.
    max_kills: int | None = None
    pg_restart_at: float = 12.0
    lease_seconds: float = 4.0
    smtp_timeout: float = 1.5
    max_seconds: float = 600.0  # a guard against a hang, counted once the workers run
    seed: int = 1234


@dataclass
class ChaosReport:
    messages: int = 0
    kills: int = 0
    pg_restarts: int = 0
    outage_seconds: float = 0.0
    faults: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    received: int = 0
    received_unique: int = 0
    duplicates: int = 0
    unknown_attempts: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    def table(self) -> str:
        rows = [
            ("messages", self.messages), ("worker SIGKILLs", self.kills),
            ("PostgreSQL restarts", self.pg_restarts),
            ("provider outage (s)", f"{self.outage_seconds:.0f}"),
            *((f"fault: {k}", v) for k, v in sorted(self.faults.items())),
            *((f"final: {k}", v) for k, v in sorted(self.statuses.items())),
            ("received by the server", self.received),
            ("distinct Message-IDs received", self.received_unique),
            ("duplicate deliveries", self.duplicates),
            ("unknown outcomes recorded", self.unknown_attempts),
            ("run time (s)", f"{self.seconds:.1f}"),
            ("problems", len(self.problems)),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v:>8}" for k, v in rows)


class _Fates:
    """Picks one fate per attempt (at RCPT) and applies it at the later stages."""

    def __init__(self, cfg: ChaosConfig, report: ChaosReport) -> None:
        self.cfg = cfg
        self.report = report
        self.rng = random.Random(cfg.seed)
        self.current: dict[str, str] = {}
        self.lock = threading.Lock()

    def __call__(self, addresses: tuple[str, ...], stage: Stage) -> Fault | None:
        if not addresses:
            return None
        rcpt = addresses[0]
        with self.lock:
            if stage is Stage.RCPT:
                self.current[rcpt] = fate = self._pick()
                if fate != "ok":
                    self.report.faults[fate] += 1
            else:
                fate = self.current.get(rcpt, "ok")
        return _FAULTS.get((fate, stage)) if fate != "timeout" or stage is not Stage.BODY \
            else Fault(Stage.BODY, delay=self.cfg.smtp_timeout + 1.0)

    def _pick(self) -> str:
        c = self.cfg
        r = self.rng.random()
        for name, p in (("4yz", c.p_transient), ("5yz", c.p_permanent),
                        ("drop before dot", c.p_drop_before_dot),
                        ("drop after dot", c.p_drop_after_dot), ("timeout", c.p_timeout)):
            if r < p:
                return name
            r -= p
        return "ok"


_FAULTS = {
    ("4yz", Stage.RCPT): Fault(Stage.RCPT, code=451),
    ("5yz", Stage.RCPT): Fault(Stage.RCPT, code=550),
    ("drop before dot", Stage.DATA): Fault(Stage.DATA, drop=True),
    ("drop after dot", Stage.BODY): Fault(Stage.BODY, drop=True),
}


def run_chaos(cfg: ChaosConfig, logs: Path, progress: bool = False) -> ChaosReport:
    """Run the chaos scenario on a private embedded PostgreSQL; return the report."""
    report = ChaosReport(messages=cfg.messages)
    pg = EmbeddedPostgres()
    server = SmtpTestServer(slow_delay=cfg.smtp_timeout + 1.0)
    server.fault_hook = _Fates(cfg, report)
    rng = random.Random(cfg.seed + 1)
    procs: list[subprocess.Popen[bytes]] = []
    started = time.monotonic()
    try:
        url = create_database(pg.start())
        _fill(url, cfg.messages)
        server.start()
        env = worker_env(
            url, server, MAILOUT_CONCURRENCY=cfg.concurrency,
            MAILOUT_LEASE_SECONDS=cfg.lease_seconds, SMTP_TIMEOUT=cfg.smtp_timeout,
            MAILOUT_RETRY_BASE_SECONDS=0.2, MAILOUT_RETRY_CAP_SECONDS=3,
            MAILOUT_MAX_ATTEMPTS=100, MAILOUT_POLL_SECONDS=0.2,
        )
        log_of: dict[int, Path] = {}

        def spawn() -> None:
            log = logs / f"worker-{len(log_of)}.log"
            procs.append(spawn_worker(env, log=log))
            log_of[procs[-1].pid] = log

        for _ in range(cfg.workers):
            spawn()
        engine = db.make_engine(url)
        outage_done = restart_done = False
        begun = time.monotonic()  # the scenario's clock: setup (initdb, fill) is not in it
        next_kill = begun + cfg.kill_every
        while True:
            now = time.monotonic() - begun
            if now > cfg.max_seconds:
                report.problems.append(f"not finished after {cfg.max_seconds:.0f} s; the "
                                       "workers' last lines: " + " | ".join(
                                           _last_line(log_of[p.pid]) for p in procs))
                break
            if not outage_done and now >= cfg.outage_at:
                server.stop_listening()
                time.sleep(cfg.outage_seconds)
                server.start_listening()
                report.outage_seconds = cfg.outage_seconds
                outage_done = True
            if not restart_done and now >= cfg.pg_restart_at:
                pg.restart()
                report.pg_restarts += 1
                restart_done = True
            # A worker that exited on its own (not one of our kills) is a finding; it is
            # started again, as its supervisor (systemd, --processes) would.
            for p in [p for p in procs if p.poll() is not None]:
                report.problems.append(f"a worker exited with {p.returncode}: "
                                       f"{_last_line(log_of[p.pid])}")
                procs.remove(p)
                spawn()
            # Only a worker that has started (said so in its log) is killed: on a
            # loaded machine a new process can take longer to start than kill_every.
            working = [p for p in procs if "started:" in log_of[p.pid].read_text()]
            if time.monotonic() >= next_kill and working and (
                    cfg.max_kills is None or report.kills < cfg.max_kills):
                victim = working[rng.randrange(len(working))]
                procs.remove(victim)
                victim.send_signal(signal.SIGKILL)
                victim.wait(10)
                report.kills += 1
                spawn()
                next_kill = time.monotonic() + cfg.kill_every
            live = _live(engine)
            if progress:
                print(f"t={now:6.1f}s live={live}", flush=True)
            if live == 0 and outage_done and restart_done:
                break
            time.sleep(0.25)
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(30)
        procs.clear()
        _check(engine, server, report)
        engine.dispose()
    finally:
        for p in procs:
            p.kill()
        server.stop()
        pg.stop()
    report.seconds = time.monotonic() - started
    return report


def _last_line(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines()
    return lines[-1][-300:] if lines else "(nothing logged)"


def _fill(url: str, n: int) -> None:
    engine = db.make_engine(url)
    migrate.upgrade(engine)
    settings = EnqueueSettings(message_id_domain="chaos.example.com")
    for start in range(0, n, 2000):
        batch = [Message(to=f"user{i}@example.com", subject=f"Message {i}", text="Hello",
                         key=f"chaos-{i}") for i in range(start, min(n, start + 2000))]
        with engine.begin() as conn:
            enqueue_many(conn, batch, settings=settings)
    engine.dispose()


def _live(engine: object) -> int:
    from sqlalchemy import Engine

    assert isinstance(engine, Engine)
    try:
        with engine.connect() as conn:
            live = messages.c.status.in_(["pending", "sending"])
            return int(conn.execute(select(func.count()).where(live)).scalar_one())
    except Exception:  # the database is restarting: not finished
        return -1


def _check(engine: object, server: SmtpTestServer, report: ChaosReport) -> None:
    from sqlalchemy import Engine

    assert isinstance(engine, Engine)
    with engine.connect() as conn:
        rows = conn.execute(select(messages.c.message_id, messages.c.status)).all()
        report.unknown_attempts = conn.execute(
            select(func.count()).select_from(attempts).where(attempts.c.outcome == "unknown")
        ).scalar_one()
    received = Counter(m.message_id for m in server.messages)
    report.received = sum(received.values())
    report.received_unique = len(received)
    report.duplicates = report.received - report.received_unique
    report.statuses = Counter(status for _, status in rows)
    for mid, status in rows:
        if status == "sent" and mid not in received:
            report.problems.append(f"{mid} is sent but the server never received it")
        if status in ("failed", "dead") and mid in received:
            report.problems.append(f"{mid} is {status} but the server received it")
        if status == "sending":
            report.problems.append(f"{mid} is left sending")
        if status == "pending":
            report.problems.append(f"{mid} is left pending")
    if sum(report.statuses.values()) != report.messages:
        report.problems.append("row count differs from messages enqueued")
    if report.duplicates > report.unknown_attempts:
        report.problems.append(
            f"{report.duplicates} duplicates but only {report.unknown_attempts} unknown outcomes"
        )
