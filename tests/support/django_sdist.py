"""Django's source distributions, fetched from PyPI once and checked against a pinned
SHA-256: the outside oracle of the Django fidelity tests (issue 31).

The sdist holds both the ``django`` package and Django's own test suite; its
``tests/mail/tests.py`` has ``BaseEmailBackendTests``, the mixin every email backend
of Django passes. :func:`sdist` downloads it with pip (``pip download``, so pip's
cache and index settings apply) into ``MAILOUT_TEST_CACHE`` (default
``~/.cache/mailout-tests``), unpacks it, and returns where. Offline, the caller skips
with the reason :class:`Unavailable` carries.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

# The oldest and the newest Django that mailout supports on Python 3.11 (Django 6.0
# needs 3.12), pinned by the SHA-256 that PyPI publishes for each sdist.
PINNED = {
    "4.2.30": "4ebc7a434e3819db6cf4b399fb5b3f536310a30e8486f08b66886840be84b37c",
    "5.2.19": "ad03d8abc51dbff95ebf34b27123cf0c26a3b62db7ba0cd520783686362533d1",
}
_PIP_TIMEOUT = 300  # seconds for one download (10 MB), pip's own retries included


class Unavailable(Exception):
    """The sdist could not be fetched (offline, no index): the test skips with why."""


@dataclass(frozen=True)
class Sdist:
    """One unpacked Django sdist."""

    version: str
    root: Path  # the unpacked tree: django/, tests/, docs/...

    @property
    def site(self) -> Path:
        """A folder holding only ``django`` (a link into the tree), for PYTHONPATH: the
        tree's own ``tests`` folder must not shadow mailout's ``tests`` package."""
        return self.root.parent / f"site-{self.version}"

    @property
    def mail_tests(self) -> Path:
        return self.root / "tests" / "mail" / "tests.py"


def cache_dir() -> Path:
    return Path(os.environ.get("MAILOUT_TEST_CACHE")
                or Path.home() / ".cache" / "mailout-tests") / "django-sdist"


def sdist(version: str) -> Sdist:
    """Django ``version``'s sdist, unpacked (fetched and checked on first use; under a
    lock, as xdist workers may ask at once)."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _fetched(version, folder)


def _fetched(version: str, folder: Path) -> Sdist:
    digest = PINNED[version]
    archive = folder / f"django-{version}.tar.gz"
    found = Sdist(version, folder / f"django-{version}")
    if found.mail_tests.is_file() and (found.site / "django").exists():
        return found
    if not archive.is_file() or _sha256(archive) != digest:
        _download(version, folder)
    actual = _sha256(archive)
    if actual != digest:
        archive.unlink()
        raise AssertionError(f"django-{version}.tar.gz has SHA-256 {actual}, "
                             f"pinned {digest}: not the sdist PyPI published")
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    found.site.mkdir(exist_ok=True)
    link = found.site / "django"
    if not link.exists():
        link.symlink_to(found.root / "django", target_is_directory=True)
    return found


def _download(version: str, folder: Path) -> None:
    # --no-binary: the sdist, the only distribution with the test suite in it. For
    # Django only: ":all:" would build its build backend from source too (that made
    # bench.bounce_corpus's download time out on a loaded machine).
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
           "--no-binary", "django", "--dest", str(folder), f"django=={version}"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=_PIP_TIMEOUT,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        raise Unavailable(f"pip download django=={version} took over {_PIP_TIMEOUT} s "
                          "(offline?)") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise Unavailable(f"pip download django=={version} failed (offline?): {last}")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
