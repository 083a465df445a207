"""What keeps console sign-ins honest beyond the tokens themselves.

* **The signing secret.** ``MAILOUT_WEB_SECRET``, else a random one made once and
  kept in the state directory (``MAILOUT_WEB_STATE_DIR``, default
  ``~/.local/state/mailout``), readable by its owner only. A key derived from the
  tokens, as before, let anyone holding a cookie (handed out by any ``GET /login``)
  test token guesses offline.
* **Token fingerprints** in the cookie are keyed with that secret, so the cookie says
  nothing about the token.
* **Ended sessions.** Each session has an id; logout writes it to a revocation file
  in the state directory, shared by every console process on the host, so a copy of
  the cookie taken before logout no longer works.
* **Login throttling** per client address: after a few failures in a row, further
  attempts from that address are refused for a doubling wait, with a log line.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import logging
import math
import os
import secrets
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

STATE_DIR_ENV = "MAILOUT_WEB_STATE_DIR"
SECRET_FILE = "web-secret"  # noqa: S105 - the file's name, not a secret
REVOKED_FILE = "web-sessions-revoked.json"
FREE_FAILURES = 5  # failed logins from one address before it must wait
FIRST_WAIT = 2.0  # seconds, doubled for each failure after that
MAX_WAIT = 300.0
MIN_TOKEN_BITS = 64  # estimated: length x log2(distinct characters)


def default_state_dir() -> Path:
    given = os.environ.get(STATE_DIR_ENV)
    if given:
        return Path(given)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "mailout"


def token_bits(token: str) -> float:
    """A rough upper bound of a token's entropy: ``aaaa...`` is 0 bits, 22 characters
    of ``secrets.token_urlsafe`` about 90."""
    distinct = len(set(token))
    return len(token) * math.log2(distinct) if distinct > 1 else 0.0


def kept_secret(state_dir: Path) -> str:
    """The secret in ``state_dir``, made (0600, created exclusively) on first use."""
    path = state_dir / SECRET_FILE
    with contextlib.suppress(FileNotFoundError):
        return path.read_text().strip()
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    value = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first: use theirs
        return path.read_text().strip()
    with os.fdopen(fd, "w") as out:
        out.write(value + "\n")
    log.info("console: made a session signing secret in %s (set MAILOUT_WEB_SECRET to "
             "share one between hosts)", state_dir, extra={"event": "web_secret_made"})
    return value


def fingerprint(secret: str, token: str) -> str:
    """Which token a session was opened with, keyed: rotating the token ends it."""
    return hmac.new(secret.encode(), b"mailout-web-fp\0" + token.encode(),
                    hashlib.sha256).hexdigest()[:32]


class Revocations:
    """Session ids ended by logout, until their sessions would have expired anyway."""

    def __init__(self, state_dir: Path, session_seconds: int) -> None:
        self.path = state_dir / REVOKED_FILE
        self.session_seconds = session_seconds
        self._cache: dict[str, float] = {}
        self._stamp: float | None = None

    def revoke(self, sid: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.path, "a+") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            held.seek(0)
            ended = _alive(_read(held.read()))
            ended[sid] = time.time() + self.session_seconds
            held.seek(0)
            held.truncate()
            held.write(json.dumps(ended))
        self._stamp = None

    def revoked(self, sid: str) -> bool:
        try:
            stamp = self.path.stat().st_mtime
        except FileNotFoundError:
            return False
        if stamp != self._stamp:
            self._cache, self._stamp = _read(self.path.read_text()), stamp
        return sid in self._cache


def _read(text: str) -> dict[str, float]:
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _alive(ended: dict[str, float]) -> dict[str, float]:
    now = time.time()
    return {sid: until for sid, until in ended.items() if until > now}


class LoginThrottle:
    """Failed logins per client address; a doubling wait after FREE_FAILURES."""

    def __init__(self) -> None:
        self._failures: dict[str, tuple[int, float]] = {}  # address -> (count, wait until)
        self._lock = threading.Lock()

    def wait_for(self, address: str) -> float:
        """Seconds ``address`` must still wait before trying again (0: go ahead)."""
        with self._lock:
            _, until = self._failures.get(address, (0, 0.0))
        return max(0.0, until - time.monotonic())

    def failed(self, address: str) -> int:
        with self._lock:
            count = self._failures.get(address, (0, 0.0))[0] + 1
            over = count - FREE_FAILURES
            wait = min(MAX_WAIT, FIRST_WAIT * 2 ** (over - 1)) if over > 0 else 0.0
            self._failures[address] = (count, time.monotonic() + wait)
            if len(self._failures) > 10_000:  # bounded: forget the oldest addresses
                for stale in list(self._failures)[:1_000]:
                    del self._failures[stale]
        return count

    def succeeded(self, address: str) -> None:
        with self._lock:
            self._failures.pop(address, None)
