"""Instructions per send of the SMTP exchange alone, counted by valgrind: no database,
no rendering, no worker; one ready-made 4 KB message (CRLF only, as the renderer
vouches) sent ``-n`` times, ``--concurrency`` at a time, to ``smtp-sink``.

For each source tree given, the sending script runs under ``valgrind --tool=callgrind``
with no sends and with N; the difference divided by N is one send: the SMTP
transaction, the pool, the deadline, the event loop (asyncio's). A figure the load of
a shared machine cannot move, and without the claim and completion batching that
moves a whole worker's count between runs (bench.instructions).

    .venv/bin/python -m bench.smtp_exchange [-n 1000] SRC [SRC ...]
    .venv/bin/python -m bench.smtp_exchange /path/to/older/checkout/src src
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from email.utils import make_msgid
from pathlib import Path

from bench.common import callgrind, smtp_sink

MESSAGE = ("From: s@x.example\r\nTo: r@x.example\r\nSubject: hello\r\n\r\n"
           + "Hello there, this is a line of a plain message.\r\n" * 80).encode()


async def send(n: int, port: int, concurrency: int) -> None:
    """``n`` sends of MESSAGE (imports here: the tree under test is on PYTHONPATH)."""
    from mailout.message.envelope import Envelope
    from mailout.models import Mailbox
    from mailout.transports.smtp.client import SmtpTransport
    from mailout.transports.smtp.settings import SmtpSettings, TlsMode

    transport = SmtpTransport(SmtpSettings(host="127.0.0.1", port=port, tls=TlsMode.NONE,
                                           pool_size=concurrency,
                                           local_hostname="bench.mailout.test"))
    slots = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        envelope = Envelope(message_id=make_msgid(domain="x.example"), idempotency_key=str(i),
                            sender=Mailbox("s@x.example"), to=(Mailbox(f"r{i}@x.example"),),
                            subject="", text=None, html=None,
                            wire_builder=lambda: MESSAGE, wire_crlf_only=True)
        async with slots:
            outcome = await transport.exchange(envelope)
        if not outcome.accepted:
            raise RuntimeError(f"send {i}: {outcome}")

    await asyncio.gather(*(one(i) for i in range(n)))
    await transport.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=1000, help="sends counted (default 1000)")
    ap.add_argument("--concurrency", type=int, default=50, help="sends at a time (default 50)")
    ap.add_argument("src", nargs="+", help="source trees whose transport to count")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    here = str(Path(__file__).resolve().parent.parent)
    with tempfile.TemporaryDirectory() as tmp, smtp_sink() as port:
        results = []
        for i, src in enumerate(args.src):
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(src).resolve()), here])}
            counts = [callgrind(["-m", "bench.smtp_exchange", "--run", str(n), str(port),
                                 str(args.concurrency)], env, Path(tmp) / f"{i}-{n}.out")
                      for n in (0, args.n)]
            results.append((src, (counts[1] - counts[0]) / args.n))
    first = results[0][1]
    print(f"\ninstructions per send, SMTP exchange alone, N={args.n}")
    for src, per_send in results:
        print(f"  {src:<40}{per_send:>12,.0f}  ({per_send / first - 1:+.1%} vs the first)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run"]:
        asyncio.run(send(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
    else:
        main()
