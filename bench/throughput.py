"""Throughput: drain rate against the raw SMTP limit, enqueue rate, claim cost, memory.

PostgreSQL (see bench/common.py) and Postfix's ``smtp-sink`` on loopback. Prints one
table:

1. Drain: N pending messages rendered from a template (subject, ~2 KB text, ~2 KB
   HTML; with ``--body short``, a subject and one line of text) drained by ``mailout
   worker --until-idle``, with 1 process and then with 2 processes started together on
   the same queue. Every state change is committed.
   "wall" counts from process start to the last exit (imports, connecting and the
   final idle check included); "steady" is sent rows over the database-clock span
   from the first claim to the last ``sent_at``.
2. Raw limit, same run: the same N messages pre-built as bytes in memory, sent by a
   plain ``smtplib`` loop over one persistent connection, no database; best of 3.
3. Enqueue: single ``enqueue`` calls, each in its own transaction; and
   ``enqueue_many`` of N rows in one transaction, three times: the median, and all three.
4. Claim cost as history grows: claiming a batch of 100 (committed) with no finished
   rows in the table, then with ``--history`` ``sent`` rows; ``--explain`` prints the
   claim's plan in both states.
5. Memory: each worker process's peak RSS while draining.

    .venv/bin/python -m bench.throughput [-n 20000] [--history 1000000] [--explain]
    .venv/bin/python -m bench.throughput -n 5000 --history 100000     # quick
    .venv/bin/python -m bench.throughput --body short --history 0 --skip-enqueue
"""

from __future__ import annotations

import argparse
import os
import smtplib
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event, func, select, text

from bench import startup
from bench.common import (
    MAIL_FROM,
    SHORT_SUBJECT,
    TEMPLATE,
    Body,
    params,
    run_workers,
    scratch_database,
    short_text,
    smtp_sink,
    worker_env,
    write_templates,
)
from mailout import db
from mailout.db import leasing, migrate
from mailout.db.schema import messages
from mailout.message.envelope import Envelope
from mailout.message.render import Renderer
from mailout.models import ClaimedMessage
from mailout.outbox import EnqueueSettings, Message, enqueue, enqueue_many

CLAIM_BATCH = 100
CLAIM_REPS = 30
BULK_RUNS = 3
PENDING_FOR_CLAIMS = 5_000
TARGETS = {1: 1_500, 2: 2_500}
CPU_TARGETS = {Body.TEMPLATE: 150e-6, Body.SHORT: 130e-6}  # seconds a message, issue 21


@dataclass
class Drain:
    label: str  # "" for this tree's workers, else the --before tree's name
    processes: int
    sent: int
    wall: float
    steady: float  # msg/s over the database-clock span of the sends
    peak_kb: list[int]
    cpu_per_message: float  # worker CPU seconds per sent message, start-up subtracted
    first_claim: float  # seconds from process start to the first claim


def settings(templates: Path) -> EnqueueSettings:
    return EnqueueSettings(templates_dir=templates, message_id_domain="shop.example.com")


def batch(n: int, tag: str, body: Body = Body.TEMPLATE) -> list[Message]:
    if body is Body.SHORT:
        return [Message(to=f"customer{i}@example.com", subject=SHORT_SUBJECT,
                        text=short_text(i), key=f"{tag}-{i}") for i in range(n)]
    return [Message(to=f"customer{i}@example.com", template=TEMPLATE, params=params(i),
                    key=f"{tag}-{i}") for i in range(n)]


def reset(engine: Engine) -> None:
    with engine.begin() as conn:
        # CASCADE: delivery events and suppressions reference the rows.
        conn.execute(text("TRUNCATE mailout_attempts, mailout_messages RESTART IDENTITY "
                          "CASCADE"))


def analyze(engine: Engine) -> None:
    # Autovacuum would get there soon; without it the planner guesses from no stats.
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(text("VACUUM ANALYZE mailout_messages"))


def fill(engine: Engine, n: int, templates: Path, tag: str,
         body: Body = Body.TEMPLATE) -> None:
    for start in range(0, n, 10_000):
        with engine.begin() as conn:
            enqueue_many(conn, batch(min(10_000, n - start), f"{tag}-{start}", body),
                         settings=settings(templates))


# -- 1 and 5: drain ----------------------------------------------------------------


def drain(engine: Engine, url: str, port: int, templates: Path, n: int, processes: int,
          concurrency: int, src: str | None = None, body: Body = Body.TEMPLATE) -> Drain:
    """One drain by ``processes`` workers; ``src``: run the workers from that source
    tree instead (PYTHONPATH), e.g. a checkout of an earlier commit, for before/after."""
    reset(engine)
    fill(engine, n, templates, f"drain{processes}", body)
    analyze(engine)
    env = worker_env(url, port, templates, concurrency)
    if src is not None:
        env["PYTHONPATH"] = src
    run = run_workers(env, processes)
    with engine.connect() as conn:
        sent, first, last = conn.execute(
            select(func.count(), func.min(messages.c.first_attempt_at),
                   func.max(messages.c.sent_at)).where(messages.c.status == "sent")).one()
    span = (last - first).total_seconds() if sent else 0.0
    # Start-up (imports, connecting, the final idle check) is measured on an empty queue
    # and taken off, so the figure is the steady state's CPU per message.
    idle = run_workers(env, 1).cpu[0]
    busy = sum(run.cpu) - idle * processes
    first_claim = first.timestamp() - run.started_at if sent else 0.0
    return Drain("" if src is None else "before", processes, sent, run.wall,
                 sent / span if span > 0 else 0.0, run.peak_kb, busy / sent if sent else 0.0,
                 first_claim)


# -- 2: raw smtplib -----------------------------------------------------------------


def prebuilt(n: int, templates: Path,
             body: Body = Body.TEMPLATE) -> list[tuple[str, str, bytes]]:
    """The drained messages as wire bytes, rendered by mailout itself beforehand."""
    return [(e.mail_from, e.recipients[0], e.wire) for e in rendered(n, templates, body)]


def rendered(n: int, templates: Path, body: Body = Body.TEMPLATE) -> list[Envelope]:
    """The drained messages as envelopes, rendered by mailout itself."""
    renderer = Renderer(templates, mail_from=MAIL_FROM)
    now = datetime.now(UTC)
    short = body is Body.SHORT
    out: list[Envelope] = []
    for i in range(n):
        msg = ClaimedMessage(
            id=i, key=f"raw-{i}", queue="default", priority=0,
            recipient=f"customer{i}@example.com", sender=None,
            template=None if short else TEMPLATE, params=None if short else params(i),
            subject=SHORT_SUBJECT if short else None, text=short_text(i) if short else None,
            html=None, headers=None,
            message_id=f"<raw{i:027d}@shop.example.com>", attempts=1, unknown_attempts=0,
            created_at=now, expires_at=None, lease_token="-", claimed_at=now, reclaimed=False)
        env = renderer.render(msg)
        out.append(env)
    return out


def raw_smtp(port: int, envelopes: list[tuple[str, str, bytes]],
             passes: int = 3) -> tuple[float, float]:
    """The best of ``passes`` runs, as (msg/s, CPU seconds per message): the limit is what
    the machine can do when least disturbed (the others' test runs share these cores),
    so the ratio is conservative."""
    best = 0.0
    cpu = float("inf")
    with smtplib.SMTP("127.0.0.1", port) as smtp:
        smtp.ehlo()
        for _ in range(passes):
            t0, c0 = time.perf_counter(), time.process_time()
            for mail_from, rcpt_to, data in envelopes:
                smtp.sendmail(mail_from, [rcpt_to], data)
            best = max(best, len(envelopes) / (time.perf_counter() - t0))
            cpu = min(cpu, (time.process_time() - c0) / len(envelopes))
    return best, cpu


# -- 3: enqueue -----------------------------------------------------------------------


def enqueue_rates(engine: Engine, templates: Path, n: int,
                  singles: int) -> tuple[float, list[float]]:
    """Single enqueues per second, and rows per second of ``BULK_RUNS`` bulk enqueues
    into an empty table (each run is short, so one stall of this shared machine
    would decide a single figure)."""
    reset(engine)
    conf = settings(templates)
    t0 = time.perf_counter()
    for i in range(singles):
        with engine.begin() as conn:
            enqueue(conn, to=f"single{i}@example.com", template=TEMPLATE, params=params(i),
                    key=f"single-{i}", settings=conf)
    single = singles / (time.perf_counter() - t0)
    bulk = []
    for run in range(BULK_RUNS):
        reset(engine)
        rows = batch(n, f"bulk{run}")
        t0 = time.perf_counter()
        with engine.begin() as conn:
            enqueue_many(conn, rows, settings=conf)
        bulk.append(n / (time.perf_counter() - t0))
    return single, bulk


# -- 4: claim cost ----------------------------------------------------------------------

HISTORY_SQL = text("""
INSERT INTO mailout_messages (idempotency_key, queue, priority, status, recipient, template,
    params, message_id, attempts, unknown_attempts, next_attempt_at, expires_at, created_at,
    first_attempt_at, last_attempt_at, sent_at, finished_at, provider_message_id,
    last_reply_code, last_reply_text)
SELECT 'history-' || g, 'default', 0, 'sent', 'old' || g || '@example.com',
    'order_confirmation', jsonb_build_object('name', 'Old', 'order_id', g),
    '<history' || g || '@shop.example.com>', 1, 0, t, t + interval '1 day', t, t, t, t, t,
    'Q' || g, 250, '2.0.0 Ok: queued as Q' || g
FROM generate_series(1, :n) AS g,
    LATERAL (SELECT now() - interval '20 days' + g * interval '1 second') AS s(t)
""")


def claim_times(engine: Engine, reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        with db.immediate(engine) as conn:
            t0 = time.perf_counter()
            got = leasing.claim(conn, owner="bench", limit=CLAIM_BATCH, lease_seconds=60)
            times.append(time.perf_counter() - t0)
        assert len(got) == CLAIM_BATCH, len(got)
    return times


def claim_plan(engine: Engine) -> str:
    """EXPLAIN ANALYZE of the claim statement exactly as leasing.claim sends it."""
    seen: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any,
                _context: Any, _executemany: bool) -> None:
        if statement.lstrip().upper().startswith(("WITH", "UPDATE")) and not seen:
            seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        with engine.connect() as conn:
            leasing.claim(conn, owner="bench", limit=CLAIM_BATCH, lease_seconds=60)
            statement, parameters = seen[0]
            raw = conn.connection.driver_connection
            assert raw is not None
            with raw.cursor() as cur:
                cur.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + statement, parameters)
                plan = "\n".join(r[0] for r in cur.fetchall())
            conn.rollback()  # leave the rows for the timed claims
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    return plan


def claim_cost(engine: Engine, templates: Path, history: int,
               explain: bool) -> tuple[float, float, list[str]]:
    plans = []
    reset(engine)
    fill(engine, PENDING_FOR_CLAIMS, templates, "claim-empty")
    analyze(engine)
    if explain:
        plans.append(claim_plan(engine))
    empty = statistics.median(claim_times(engine, CLAIM_REPS))
    reset(engine)
    fill(engine, PENDING_FOR_CLAIMS, templates, "claim-full")
    t0 = time.perf_counter()
    with engine.begin() as conn:
        conn.execute(HISTORY_SQL, {"n": history})
    print(f"  ({history:,} sent rows inserted in {time.perf_counter() - t0:.1f}s)", flush=True)
    analyze(engine)
    if explain:
        plans.append(claim_plan(engine))
    full = statistics.median(claim_times(engine, CLAIM_REPS))
    return empty, full, plans


# -- the run -------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=20_000, help="messages per drain (default 20000)")
    ap.add_argument("--concurrency", type=int, default=50,
                    help="MAILOUT_CONCURRENCY (and so SMTP connections) of each worker "
                         "(default 50)")
    ap.add_argument("--processes", default="1,2", help="worker process counts to drain with")
    ap.add_argument("--singles", type=int, default=2_000, help="single enqueues to time")
    ap.add_argument("--history", type=int, default=1_000_000,
                    help="sent rows for the claim-cost check (0 skips it)")
    ap.add_argument("--explain", action="store_true", help="print the claim plans")
    ap.add_argument("--skip-enqueue", action="store_true")
    ap.add_argument("--before", metavar="SRC",
                    help="also drain (1 process, interleaved) with the workers of this source "
                         "tree, e.g. the src/ of a worktree of an earlier commit: before/after "
                         "CPU per message in one run")
    ap.add_argument("--before-rounds", type=int, default=3,
                    help="interleaved before/after drain pairs (default 3; medians)")
    ap.add_argument("--body", type=Body, choices=list(Body), default=Body.TEMPLATE,
                    help="template (subject, ~2 KB text, ~2 KB HTML; the default) or short "
                         "(a subject and one line of text, no template)")
    args = ap.parse_args()
    counts = [int(p) for p in args.processes.split(",") if p.strip()]
    with tempfile.TemporaryDirectory() as tmp, scratch_database() as url, \
            smtp_sink() as port:
        templates = write_templates(Path(tmp))
        engine = db.make_engine(url)
        migrate.upgrade(engine)
        with engine.connect() as conn:
            version = conn.execute(text("SHOW server_version")).scalar_one()
        drains = []
        for processes in counts:
            print(f"draining {args.n} with {processes} worker process(es)...", flush=True)
            drains.append(drain(engine, url, port, templates, args.n, processes,
                                args.concurrency, body=args.body))
        pairs: list[tuple[Drain, Drain]] = []
        for r in range(args.before_rounds if args.before else 0):
            # Every other pair runs the current tree first: a drain leaves work behind it
            # (dead rows to vacuum, a warm cache) that the next one meets.
            print(f"draining {args.n} before/after, 1 process...", flush=True)
            srcs = [args.before, None] if r % 2 == 0 else [None, args.before]
            ran = {src: drain(engine, url, port, templates, args.n, 1, args.concurrency, src,
                              args.body) for src in srcs}
            pairs.append((ran[args.before], ran[None]))
        print("sending the same messages with smtplib...", flush=True)
        raw, raw_cpu = raw_smtp(port, prebuilt(args.n, templates, args.body))
        single = bulk = None
        if not args.skip_enqueue:
            print("enqueueing...", flush=True)
            single, bulk = enqueue_rates(engine, templates, args.n, args.singles)
        claims = None
        if args.history > 0:
            print("claim cost...", flush=True)
            claims = claim_cost(engine, templates, args.history, args.explain)
        engine.dispose()
    report(args, version, drains, raw, raw_cpu, single, bulk, claims)
    # "1st claim" above is from process start; what part of it the imports cannot lose:
    print(startup.describe(startup.measure()))
    if pairs:
        report_before_after(args, pairs, raw_cpu)


def report(args: argparse.Namespace, version: str, drains: list[Drain], raw: float,
           raw_cpu: float, single: float | None, bulk: list[float] | None,
           claims: tuple[float, float, list[str]] | None) -> None:
    print(f"\nN={args.n} {args.body} messages, concurrency {args.concurrency} per process, "
          f"PostgreSQL {version}, smtp-sink on loopback")
    print(f"{'':<36}{'rate':>10}{'target':>10}{'vs raw':>8}{'wall s':>8}{'steady':>8}"
          f"{'peak RSS MB':>13}{'CPU/msg':>10}{'1st claim':>11}")
    for d in drains:
        rate = d.sent / d.wall
        target = TARGETS.get(d.processes)
        flag = "" if target is None else f">={target}"
        rss = "+".join(f"{kb / 1024:.0f}" for kb in d.peak_kb)
        note = "" if d.sent == args.n else f"  (only {d.sent} sent!)"
        print(f"{f'drain, {d.processes} worker process(es)':<36}{rate:>8.0f}/s{flag:>10}"
              f"{rate / raw:>7.0%}{d.wall:>8.1f}{d.steady:>8.0f}{rss:>13}"
              f"{d.cpu_per_message * 1e6:>8.0f}us{d.first_claim * 1000:>9.0f}ms{note}")
    print(f"{'raw smtplib, 1 connection, no DB':<36}{raw:>8.0f}/s{'':>10}{'100%':>8}"
          f"{'':>8}{'':>8}{'':>13}{raw_cpu * 1e6:>8.0f}us  (best of 3 passes)")
    for d in drains:
        print(f"worker CPU per message, {d.processes} process(es): "
              f"{d.cpu_per_message * 1e6:.0f} us "
              f"= {d.cpu_per_message / raw_cpu:.1f}x raw smtplib's {raw_cpu * 1e6:.0f} us "
              f"(target <= {CPU_TARGETS[args.body] * 1e6:.0f} us for this {args.body} message)")
    if single is not None and bulk is not None:
        print(f"{'enqueue, one per transaction':<36}{single:>8.0f}/s")
        runs = ", ".join(f"{r:.0f}" for r in bulk)
        print(f"{'enqueue_many, one transaction':<36}{statistics.median(bulk):>8.0f}/s"
              f"{'>=20000':>10}  (median of {runs})")
    if claims is not None:
        empty, full, plans = claims
        print(f"{f'claim {CLAIM_BATCH}, no finished rows':<36}{empty * 1000:>8.2f}ms")
        print(f"{f'claim {CLAIM_BATCH}, {args.history:,} sent rows':<36}{full * 1000:>8.2f}ms"
              f"{'<=1.3x':>10}{full / empty:>7.2f}x")
        titles = ("no finished rows", f"{args.history:,} sent rows")
        for title, plan in zip(titles, plans, strict=False):  # no plans without --explain
            print(f"\nclaim plan, {title}:\n{plan}")
    for d in drains:
        if d.processes == 2:
            print(f"\n2 worker processes drain at {d.sent / d.wall / raw:.0%} of the raw smtplib "
                  "limit measured in this run (target >= 50%)")


def report_before_after(args: argparse.Namespace, pairs: list[tuple[Drain, Drain]],
                        raw_cpu: float) -> None:
    """CPU per message of the --before tree's worker and this one's, drained in turn."""
    print(f"\nbefore/after, 1 process, {len(pairs)} interleaved pairs (before = {args.before}):")
    for i, (before, after) in enumerate(pairs, 1):
        print(f"  pair {i}: before {before.cpu_per_message * 1e6:.0f} us at "
              f"{before.sent / before.wall:.0f} msg/s, after "
              f"{after.cpu_per_message * 1e6:.0f} us at {after.sent / after.wall:.0f} msg/s")
    b = statistics.median(p[0].cpu_per_message for p in pairs)
    a = statistics.median(p[1].cpu_per_message for p in pairs)
    print(f"worker CPU per message, medians: before {b * 1e6:.0f} us, after {a * 1e6:.0f} us "
          f"({100 * (a / b - 1):+.0f}%); raw smtplib {raw_cpu * 1e6:.0f} us "
          f"(after = {a / raw_cpu:.1f}x raw); load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
