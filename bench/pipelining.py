"""What SMTP PIPELINING buys when the server is a network round trip away.

On loopback a round trip costs microseconds, so the throughput benchmark cannot
show it. Here the transport alone (no database) sends the same pre-rendered
messages to ``smtp-sink`` through a relay that holds every chunk for ``--delay``
milliseconds in each direction, as a link with that round-trip time would,
once with pipelining and once without. A send is then about four round trips
one command at a time (MAIL, RCPT, DATA, content) and two when pipelined.

With ``--pool`` below ``--concurrency`` (fewer connections than sends under way, as
for a provider that caps connections), a pipelined send that waits for a connection
rides on another's: its MAIL, RCPT and DATA go out behind that send's content, so a
connection carries a message per round trip instead of one per two.

    .venv/bin/python -m bench.pipelining [-n 2000] [--delay 10] [--concurrency 20]
    .venv/bin/python -m bench.pipelining --concurrency 20 --pool 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from pathlib import Path

from bench.common import smtp_sink, write_templates
from bench.throughput import rendered
from mailout.message.envelope import Envelope
from mailout.transports.base import Decision
from mailout.transports.smtp.client import SmtpTransport
from mailout.transports.smtp.settings import SmtpSettings, TlsMode


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                delay: float) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay`` seconds late, in order."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, chunk = await queue.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            if not chunk:
                writer.close()
                return
            writer.write(chunk)

    sender = asyncio.create_task(deliver())
    while True:
        chunk = await reader.read(65536)
        queue.put_nowait((loop.time() + delay, chunk))
        if not chunk:
            break
    await sender


async def _relay(target_port: int, delay: float) -> asyncio.Server:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", target_port)
        # Cancelled at the end of the run: asyncio.run() ends what is still open.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(_pump(client_r, server_w, delay),
                                 _pump(server_r, client_w, delay), return_exceptions=True)

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def _send_all(port: int, envelopes: list[Envelope], concurrency: int, pool: int,
                    pipelining: bool) -> float:
    transport = SmtpTransport(SmtpSettings(
        host="127.0.0.1", port=port, tls=TlsMode.NONE, timeout=60,
        local_hostname="bench.example.com", pool_size=pool, pipelining=pipelining))
    todo = iter(envelopes)

    async def lane() -> None:
        for envelope in todo:
            result = await transport.send(envelope)
            assert result.decision is Decision.SENT, result

    t0 = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    elapsed = time.perf_counter() - t0
    await transport.close()
    return len(envelopes) / elapsed


async def _run(args: argparse.Namespace, sink_port: int, envelopes: list[Envelope]) -> None:
    relay = await _relay(sink_port, args.delay / 1000)
    port = relay.sockets[0].getsockname()[1]
    pool = args.pool or args.concurrency
    print(f"{args.n} messages, {args.concurrency} sends under way over {pool} connections, "
          f"{2 * args.delay:g} ms round trip added by the relay")
    rates: dict[bool, list[float]] = {}
    for pipelining in (False, True, False, True):  # twice each, interleaved
        rate = await _send_all(port, envelopes, args.concurrency, pool, pipelining)
        rates.setdefault(pipelining, []).append(rate)
    for pipelining, label in ((False, "one command at a time"), (True, "pipelined")):
        runs = ", ".join(f"{r:.0f}" for r in rates[pipelining])
        print(f"{label:<24}{max(rates[pipelining]):>8.0f} msg/s  (runs: {runs})")
    print(f"pipelined / one at a time: {max(rates[True]) / max(rates[False]):.2f}x")
    relay.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=2000, help="messages per run (default 2000)")
    ap.add_argument("--delay", type=float, default=10.0,
                    help="one-way delay in milliseconds (default 10: a 20 ms round trip)")
    ap.add_argument("--concurrency", type=int, default=20,
                    help="sends under way at once (default 20)")
    ap.add_argument("--pool", type=int, default=0,
                    help="SMTP connections (SMTP_POOL_SIZE; default: --concurrency)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, smtp_sink() as sink_port:
        envelopes = rendered(args.n, write_templates(Path(tmp)))
        asyncio.run(_run(args, sink_port, envelopes))


if __name__ == "__main__":
    main()
