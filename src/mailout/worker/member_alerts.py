"""Failover members' transitions, told to the operator: one alert and a metric each.

A member of ``failover(...)`` / ``roundrobin(...)`` that goes down or comes back is
logged once by the transport (:mod:`mailout.transports.members`); the worker adds
what a transport cannot reach: the alert (``member_down``, ``member_up``, one per
transition, never per send or per failed probe) and the member's state for the
observer (``mailout_transport_member_state``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from mailout.metrics.observer import Observer
from mailout.support.alerts import Alert, Alerts
from mailout.transports.base import Transport
from mailout.transports.members import Change, State
from mailout.transports.multi import MultiTransport


def watch(transports: Iterable[Transport], alerts: Alerts, observer: Observer,
          worker: str) -> None:
    """Report the members of every multi-transport in ``transports`` from now on."""
    for transport in transports:
        if not isinstance(transport, MultiTransport):
            continue
        transport.watch(functools.partial(_changed, alerts, observer, worker))
        for label, state in transport.states().items():
            observer.member(transport.name, label, state.value, None)


def _changed(alerts: Alerts, observer: Observer, worker: str, change: Change) -> None:
    observer.member(change.transport, change.member, change.state.value, change.reason)
    if not change.transition:
        return  # a failed probe: logged by the transport, no news for an alert
    details = {"transport": change.transport, "member": change.member, "worker": worker}
    if change.state is State.DOWN:
        alerts.fire(Alert("member_down", f"{change.transport} member {change.member} is "
                                         f"down: {change.reason}",
                          {**details, "reason": change.reason,
                           "seconds": round(change.seconds)}))
    else:
        alerts.fire(Alert("member_up", f"{change.transport} member {change.member} is back "
                                       f"after {change.seconds:.0f}s",
                          {**details, "seconds": round(change.seconds),
                           "failed_probes": change.failed_probes}))
