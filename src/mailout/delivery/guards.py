"""Send-time guards: the last look before a message leaves.

Just before sending, a worker asks, in this order:

1. Does it understand the message? A payload ``schema_version`` newer than the
   worker's template (``meta.toml``: ``schema = 2``) leaves it pending: during a
   rolling deploy, old workers never send a half-understood message.
2. Is the business event still true? A check registered for the template
   (``MAILOUT_CHECKS=myapp.mail:checks``, a mapping of template name to
   ``check(message, connection) -> bool``) that answers False cancels it
   (reason ``stale``). A check that raises is a transient failure, never a send.
3. Who gets it? Recipient policy per template: ``snapshot`` (the address stored at
   enqueue, the default) or ``resolve``: a resolver registered in
   ``MAILOUT_RESOLVERS`` returns the current verified address, or None, which
   cancels it (reason ``no_recipient``). A resolver replaces the first To address
   only; Cc and Bcc go as enqueued.
4. Is an address suppressed? A hard bounce, a complaint, an unsubscribe or
   repeated soft bounces put it on the suppression list (:mod:`mailout.feedback.ingest`);
   mail to it is cancelled (reason ``suppressed``) and never reaches the transport.
   The claim reads the list for the first recipient of each row it leases
   (``ClaimedMessage.suppressed``), so the check costs no extra query and enqueue
   pays nothing; an address found by a resolver is looked up on the resolver's
   connection. Of a message to several recipients, every recipient is looked up;
   the suppressed ones are left out (settled ``suppressed``) and the others get it;
   it is cancelled only when all are.
5. May it go there? ``MAILOUT_ALLOW_DOMAINS`` cancels a message any of whose
   recipients (To, Cc or Bcc) is in another domain (reason ``not_allowed``);
   ``MAILOUT_REDIRECT_TO`` delivers everything to one address instead, every To,
   Cc and Bcc recipient dropped, the To and Cc addresses kept in ``X-Original-To``
   and ``X-Original-Cc`` (Bcc addresses never go into a header).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import Connection, Engine

from mailout.db.suppressions import suppressed_among
from mailout.exceptions import ConfigError, InvalidMessage
from mailout.message import addresses
from mailout.message.addresses import normalize_address
from mailout.models import ClaimedMessage, Mailbox, Settled

Check = Callable[[ClaimedMessage, Connection], bool]
Resolver = Callable[[ClaimedMessage, Connection], "str | None"]


@dataclass(frozen=True, slots=True)
class Proceed:
    message: ClaimedMessage  # possibly with another recipient and X-Original-To
    redirected_to: str | None = None


@dataclass(frozen=True, slots=True)
class Cancel:
    reason: str  # stale, no_recipient, suppressed, not_allowed
    detail: str


@dataclass(frozen=True, slots=True)
class Retry:
    detail: str  # a check or resolver raised


@dataclass(frozen=True, slots=True)
class Hold:
    detail: str  # a schema version this worker does not know


Verdict = Proceed | Cancel | Retry | Hold


@dataclass(frozen=True)
class Guards:
    checks: Mapping[str, Check] = field(default_factory=dict)
    resolvers: Mapping[str, Resolver] = field(default_factory=dict)
    redirect_to: str | None = None
    allow_domains: frozenset[str] | None = None
    schemas: Mapping[str, int] = field(default_factory=dict)  # template -> known version
    suppression: bool = True  # cancel mail to suppressed addresses (reason suppressed)

    @property
    def needs_database(self) -> bool:
        return bool(self.checks or self.resolvers)

    def needs_database_for(self, msg: ClaimedMessage) -> bool:
        """Whether deciding about ``msg`` reads the database: a registered check or
        resolver, or the suppression list for a message to several recipients (the
        claim looked up the first one only)."""
        return self.needs_database or (self.suppression and msg.several_recipients)

    def verdict(self, msg: ClaimedMessage, engine: Engine | None) -> Verdict:
        """Decide about ``msg``. Runs registered callables on a connection of ``engine``."""
        known = self.schemas.get(msg.template or "", 1)
        if msg.schema_version is not None and msg.schema_version > known:
            return Hold(f"payload schema {msg.schema_version} is newer than this worker's "
                        f"{known} for template {msg.template!r}")
        check = self.checks.get(msg.template or "")
        resolver = self.resolvers.get(msg.template or "")
        several = self.suppression and msg.several_recipients
        if self.suppression and msg.suppressed and not several:
            return Cancel("suppressed", f"{msg.recipient} is on the suppression list")
        if (check or resolver or several) and engine is not None:
            with engine.connect() as conn:
                try:
                    if check is not None and not check(msg, conn):
                        return Cancel("stale", f"event {msg.event_ref!r} version "
                                      f"{msg.event_version!r} is no longer current")
                    if resolver is not None:
                        resolved = resolver(msg, conn)
                        if resolved is None:
                            return Cancel("no_recipient", "the resolver found no address")
                        msg = _with_recipient(msg, addresses.address("recipient", resolved))
                    if several:
                        found = _suppressed(conn, msg)
                        if isinstance(found, Cancel):
                            return found
                        msg = found
                    elif self.suppression and resolver is not None and suppressed_among(
                            conn, [normalize_address(msg.recipient)]):
                        return Cancel("suppressed",
                                      f"{msg.recipient} is on the suppression list")
                except InvalidMessage as exc:
                    return Cancel("no_recipient", f"the resolver gave a bad address: {exc}")
                except Exception as exc:  # a bug or outage in app code: retry, never send
                    return Retry(f"{type(exc).__name__} in a send-time check: {exc}"[:200])
        return self._destination(msg)

    def _destination(self, msg: ClaimedMessage) -> Verdict:
        if self.allow_domains is not None:
            for address in msg.envelope_recipients:
                domain = address.rpartition("@")[2].lower()
                if domain not in self.allow_domains:
                    return Cancel("not_allowed",
                                  f"domain {domain} is not in MAILOUT_ALLOW_DOMAINS")
        if self.redirect_to is None:
            return Proceed(msg)
        headers = dict(msg.headers or {})
        headers["X-Original-To"] = ", ".join(m.address for m in msg.to) or msg.recipient
        if msg.cc:
            headers["X-Original-Cc"] = ", ".join(m.address for m in msg.cc)
        redirected = replace(msg, recipient=self.redirect_to, headers=headers, to=(), cc=(),
                             bcc=(), settled={})
        return Proceed(redirected, redirected_to=self.redirect_to)


def _with_recipient(msg: ClaimedMessage, recipient: str) -> ClaimedMessage:
    """``msg`` with its first To address replaced (display name kept)."""
    if recipient == msg.recipient:
        return msg
    to = (Mailbox(recipient, msg.to[0].name), *msg.to[1:]) if msg.to else ()
    return replace(msg, recipient=recipient, to=to)


def _suppressed(conn: Connection, msg: ClaimedMessage) -> ClaimedMessage | Cancel:
    """``msg`` without its suppressed recipients (settled ``suppressed``); a Cancel
    when nobody it would go to is left."""
    pending = msg.pending_recipients
    hit = suppressed_among(conn, [normalize_address(a) for a in pending])
    if not hit:
        return msg
    blocked = [a for a in pending if normalize_address(a) in hit]
    if len(blocked) == len(pending):
        shown = f"{blocked[0]} is" if len(blocked) == 1 else f"all {len(blocked)} recipients are"
        return Cancel("suppressed", f"{shown} on the suppression list")
    settled = {**msg.settled, **dict.fromkeys(blocked, Settled.SUPPRESSED.value)}
    return replace(msg, settled=settled)


def load_registry(spec: str | None, setting: str) -> dict[str, Callable[..., Any]]:
    """Import ``module:attribute``, a mapping of template names to callables."""
    if not spec:
        return {}
    module_name, _, attr = spec.partition(":")
    try:
        registry = getattr(importlib.import_module(module_name), attr or "checks")
    except (ImportError, AttributeError) as exc:
        raise ConfigError(setting, f"cannot load {spec!r}: {exc}") from None
    if not isinstance(registry, Mapping) or not all(callable(v) for v in registry.values()):
        raise ConfigError(setting, f"{spec!r} must be a mapping of template names to callables")
    return dict(registry)


def parse_domains(raw: str | None) -> frozenset[str] | None:
    if not raw:
        return None
    return frozenset(d.strip().lower() for d in raw.split(",") if d.strip())
