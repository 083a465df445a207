"""``mailout dev-sink``: the local development SMTP server, writing ``.eml`` files.

The same sink ``mailout demo`` runs in-process (:mod:`mailout.transports.smtp.devsink`),
here as a command: on 127.0.0.1 only, no TLS, no AUTH, every message accepted. With
``--background`` it runs as a child process and the command returns once the port
accepts connections, so that a script can send to it on the next line.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType

import click

from mailout.cli import terminal
from mailout.cli.common import DEV_SINK_PORT

PID_FILE = "dev-sink.pid"
LOG_FILE = "dev-sink.log"
READY_SECONDS = 30.0  # how long --background waits for the child to listen
# The child prints this once its own socket is bound. --background waits for it in the
# log rather than for the port to answer: another process already on the port answers too.
READY_LINE = "dev-sink listening on"


@click.command("dev-sink")
@click.option("--port", type=click.IntRange(1, 65535), envvar="SMTP_PORT",
              default=DEV_SINK_PORT, show_default=True,
              help="Port on 127.0.0.1 [env: SMTP_PORT, so the worker finds it].")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=Path("sink-mail"), show_default=True,
              help="Where each accepted message is written as <n>.eml.")
@click.option("--background", is_flag=True,
              help=f"Run in a child process; return once it listens. Its pid is in "
                   f"DIR/{PID_FILE}, its output in DIR/{LOG_FILE}.")
def dev_sink_cmd(port: int, directory: Path, background: bool) -> None:
    """Run a local SMTP server for development that writes every message to a file.

    Send to it with SMTP_HOST=127.0.0.1 SMTP_PORT=<port> SMTP_TLS=none (no SMTP_USER).
    Runs until Ctrl-C or SIGTERM. Loopback only: never expose it.
    """
    if background:
        _start_in_background(port, directory)
        return
    from mailout.transports.smtp.devsink import Delivered, DevSink

    def saved(message: Delivered) -> None:
        click.echo(terminal.clean(f"{message.path}: from <{message.mail_from}> to "
                                  f"{', '.join(message.rcpt_tos)}"))

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    try:
        sink = DevSink(directory, faults=False, port=port, on_save=saved).start()
    except OSError as exc:
        raise click.ClickException(f"{exc} (is another sink running? try --port)") from None
    click.echo(f"{READY_LINE} {sink.host}:{sink.port}, writing {directory}/ "
               "(Ctrl-C to stop)")
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        sink.stop()


def _start_in_background(port: int, directory: Path) -> None:
    """Start the sink as a child process, wait until it says it listens, write its pid."""
    directory.mkdir(parents=True, exist_ok=True)
    log_path = directory / LOG_FILE
    with open(log_path, "ab") as log:
        start = log.tell()  # the log is appended to: only this child's lines count
        child = subprocess.Popen(  # noqa: S603 - our own interpreter and fixed arguments
            [sys.executable, "-m", "mailout", "dev-sink", "--port", str(port),
             "--dir", str(directory)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C in the shell does not stop it: `kill` does
        )
    deadline = time.monotonic() + READY_SECONDS
    while READY_LINE not in _said_since(log_path, start):
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            said = _said_since(log_path, start).strip().splitlines()
            raise click.ClickException("dev-sink did not start: "
                                       + terminal.clean(said[-1] if said else "no output"))
        time.sleep(0.1)
    (directory / PID_FILE).write_text(f"{child.pid}\n")
    click.echo(f"dev-sink running in the background (pid {child.pid}) on 127.0.0.1:{port}, "
               f"writing {directory}/; stop it with: kill $(cat {directory / PID_FILE})")


def _said_since(log_path: Path, offset: int) -> str:
    with open(log_path, "rb") as log:
        log.seek(offset)
        return log.read().decode(errors="replace")
