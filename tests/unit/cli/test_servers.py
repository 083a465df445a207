"""The servers the CLI starts have distinct default ports (issue 14)."""

from __future__ import annotations

import click

from mailout.cli.common import DEV_SINK_PORT, WEB_PORT, WEBHOOKS_PORT
from mailout.cli.main import cli


def _port_default(*path: str) -> object:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        found = command.commands[name]
        command = found
    (port,) = [p for p in command.params if p.name == "port"]
    return port.default


def test_web_webhooks_and_the_dev_sink_default_to_distinct_ports() -> None:
    defaults = {
        "web": _port_default("web"),
        "webhooks serve": _port_default("webhooks", "serve"),
        "dev-sink": _port_default("dev-sink"),
    }
    assert defaults == {"web": WEB_PORT, "webhooks serve": WEBHOOKS_PORT,
                        "dev-sink": DEV_SINK_PORT}
    assert len(set(defaults.values())) == 3
