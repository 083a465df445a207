"""Public corpora of real bounce messages, and an outside oracle for what each one says.

Nothing here is committed third-party data: the corpora are fetched when a benchmark or
a test asks for them, and cached.

- ``flufl``: the test messages of ``flufl.bounce`` (GNU Mailman's bounce detectors), from
  its sdist on PyPI, version and sha256 pinned. Real bounces from Postfix, qmail, Exim,
  Exchange, GroupWise, Yahoo, AOL and others, with the addresses Mailman's tests expect.
- any directory of messages (one per file), e.g. a checkout of Sisimai's
  ``set-of-emails/maildir/bsd``.

The expected recipient, status, reason and hard/soft verdict of every message come from
Sisimai (Debian's ``libsisimai-perl``), an established bounce classifier that nobody here
wrote: :func:`sisimai_oracle` runs it once over all files. Sisimai's verdict: ``hard`` for
a mailbox or domain that does not exist (``userunknown``, ``hostunknown``, ``hasmoved``,
``notaccept``), ``complaint`` for a feedback report, no verdict for a delivery or an
auto-reply, ``soft`` for everything else.

:class:`CorpusUnavailable` says why a corpus or the oracle cannot be had (PyPI
unreachable, Perl's Sisimai not installed); tests skip with that reason.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Sdist:
    """One pinned source distribution on PyPI."""

    name: str
    version: str
    sha256: str

    @property
    def filename(self) -> str:
        return f"{self.name.replace('.', '_').replace('-', '_')}-{self.version}.tar.gz"


FLUFL_BOUNCE = Sdist("flufl.bounce", "6.0.0",
                     "a1df16b9d1877ae4536f7d76c00d8421fcefbe694f80f5285d05c45a2547b1bc")
_FLUFL_DATA = "tests/data/"
_FLUFL_EXPECTED = "tests/test_detectors.py"

# Sisimai's verdicts, from Sisimai::SMTP::Error->soft_or_hard and Sisimai::Data.
VERDICT_HARD = "hard"
VERDICT_SOFT = "soft"
VERDICT_COMPLAINT = "complaint"
VERDICT_NONE = "none"  # a delivery, an auto-reply: no bounce at all
VERDICT_AUTH_FAILURE = "auth_failure"  # Sisimai's feedback of type auth-failure (RFC 6591)

_SISIMAI_PSEUDO_STATUS = re.compile(r"[245]\.0\.9\d\d")
_SISIMAI_SCRIPT = r"""
use strict; use warnings; use Sisimai; use JSON::PP;
my $json = JSON::PP->new->canonical;
for my $path (@ARGV) {
    my $data = eval { Sisimai->make($path, 'delivered' => 1, 'vacation' => 1) } || [];
    my @rows = map { { address => $_->recipient->address, reason => $_->reason,
        softbounce => $_->softbounce, status => $_->deliverystatus, action => $_->action,
        feedbacktype => $_->feedbacktype, agent => $_->smtpagent,
        messageid => $_->messageid, addresser => $_->addresser->address } } @$data;
    print $json->encode({ file => $path, rows => \@rows }), "\n";
}
"""


class CorpusUnavailable(RuntimeError):
    """A corpus or the oracle cannot be had here; the message says why."""


@dataclass(frozen=True)
class Expected:
    """What the oracle says about one recipient of one message."""

    address: str
    verdict: str  # VERDICT_*
    reason: str  # Sisimai's reason: userunknown, mailboxfull, blocked, feedback...
    status: str | None  # the enhanced status code, None when Sisimai made one up
    message_id: str | None = None  # the returned original's Message-ID, bare, if found
    sender: str | None = None  # the original's sender (Sisimai's addresser), lower case


@dataclass(frozen=True)
class Sample:
    """One message of a corpus."""

    name: str
    path: Path
    data: bytes
    expected: tuple[Expected, ...]  # from Sisimai
    mailman: tuple[str, ...] | None = None  # addresses flufl.bounce's tests expect


def cache_root() -> Path:
    """``MAILOUT_CORPUS_CACHE``, else ``~/.cache/mailout/corpora``."""
    given = os.environ.get("MAILOUT_CORPUS_CACHE")
    return Path(given) if given else Path.home() / ".cache" / "mailout" / "corpora"


def fetch_sdist(sdist: Sdist, root: Path | None = None) -> Path:
    """The sdist's tarball, downloaded once with pip and checked against its sha256."""
    root = root or cache_root()
    target = root / sdist.filename
    if target.is_file() and _sha256(target) == sdist.sha256:
        return target
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        # --no-binary for this one package only: with ":all:" pip also builds the
        # sdist's build backend (and its build dependencies) from source to read its
        # metadata, which took over 300 s on a loaded machine.
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", sdist.name,
               "--no-deps", "--dest", tmp,
               f"{sdist.name}=={sdist.version}"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CorpusUnavailable(f"pip download {sdist.name}: {exc}") from None
        got = Path(tmp) / sdist.filename
        if done.returncode != 0 or not got.is_file():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise CorpusUnavailable(f"PyPI: cannot download {sdist.name}=={sdist.version} "
                                    f"({last})")
        digest = _sha256(got)
        if digest != sdist.sha256:
            raise CorpusUnavailable(f"{sdist.filename}: sha256 {digest} is not the pinned "
                                    f"{sdist.sha256}")
        shutil.move(str(got), target)
    return target


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def flufl_files(root: Path | None = None) -> tuple[list[Path], dict[str, tuple[str, ...]]]:
    """flufl.bounce's test messages, extracted once, and Mailman's expected addresses
    by file name (from the DETECTORS table of its tests)."""
    root = root or cache_root()
    tarball = fetch_sdist(FLUFL_BOUNCE, root)
    top = f"flufl_bounce-{FLUFL_BOUNCE.version}/"
    out = root / f"flufl_bounce-{FLUFL_BOUNCE.version}-data"
    expected_py = out / "test_detectors.py"
    if not expected_py.is_file():
        staging = Path(tempfile.mkdtemp(dir=root))
        with tarfile.open(tarball) as tar:
            for member in tar.getmembers():
                name = member.name.removeprefix(top)
                in_data = (f"{Path(name).parent.as_posix()}/" == _FLUFL_DATA
                           and name.endswith(".txt"))
                if not member.isfile() or not (in_data or name == _FLUFL_EXPECTED):
                    continue
                source = tar.extractfile(member)
                if source is not None:
                    (staging / Path(name).name).write_bytes(source.read())
        try:
            staging.rename(out)  # atomic: a concurrent reader sees all of it or nothing
        except OSError:  # another process extracted it first
            shutil.rmtree(staging, ignore_errors=True)
    files = sorted(p for p in out.iterdir() if p.suffix == ".txt")
    return files, _mailman_expected(expected_py.read_text("utf-8"))


def _mailman_expected(source: str) -> dict[str, tuple[str, ...]]:
    """``DETECTORS = [(detector, filename, [addresses], is_temporary), ...]``, read as
    data (never executed)."""
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "DETECTORS"):
            table = ast.literal_eval(node.value)
            return {name: tuple(a.decode("ascii").lower() for a in addrs)
                    for _, name, addrs, _ in table}
    raise CorpusUnavailable("flufl.bounce's tests no longer have a DETECTORS table")


def directory_files(directory: Path) -> list[Path]:
    """Every regular file of a directory of messages (not recursive), sorted."""
    if not directory.is_dir():
        raise CorpusUnavailable(f"{directory}: not a directory")
    return sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))


def sisimai_oracle(files: list[Path]) -> dict[Path, tuple[Expected, ...]]:
    """Sisimai's reading of every file, in one Perl process."""
    perl = shutil.which("perl")
    if perl is None:
        raise CorpusUnavailable("perl is not installed (the oracle is Perl's Sisimai)")
    probe = subprocess.run([perl, "-MSisimai", "-e", "1"], capture_output=True, check=False)
    if probe.returncode != 0:
        raise CorpusUnavailable("Perl's Sisimai is not installed "
                                "(Debian: apt-get install libsisimai-perl)")
    done = subprocess.run([perl, "-e", _SISIMAI_SCRIPT, *map(str, files)],
                          capture_output=True, text=True, check=True, timeout=600)
    out: dict[Path, tuple[Expected, ...]] = {}
    for line in done.stdout.splitlines():
        doc = json.loads(line)
        out[Path(doc["file"])] = tuple(_expected(row) for row in doc["rows"])
    return out


def _expected(row: dict[str, object]) -> Expected:
    reason = str(row.get("reason") or "")
    if reason == "feedback" and row.get("feedbacktype") == "auth-failure":
        verdict = VERDICT_AUTH_FAILURE
    elif reason == "feedback":
        verdict = VERDICT_COMPLAINT
    elif reason in ("delivered", "vacation") or row.get("softbounce") == -1:
        verdict = VERDICT_NONE
    else:
        verdict = VERDICT_SOFT if row.get("softbounce") == 1 else VERDICT_HARD
    status = str(row.get("status") or "")
    # Sisimai writes x.0.9yz for a status it inferred from text: not a code anyone sent.
    real = status if status and not _SISIMAI_PSEUDO_STATUS.fullmatch(status) else None
    return Expected(address=str(row.get("address") or "").lower(), verdict=verdict,
                    reason=reason, status=real,
                    message_id=str(row.get("messageid") or "").strip("<> ") or None,
                    sender=str(row.get("addresser") or "").lower() or None)


def load(name_or_dir: str) -> list[Sample]:
    """The samples of ``flufl`` or of a directory, each with the oracle's reading."""
    mailman: dict[str, tuple[str, ...]] = {}
    if name_or_dir == "flufl":
        files, mailman = flufl_files()
    else:
        files = directory_files(Path(name_or_dir))
    oracle = sisimai_oracle(files)
    return [Sample(name=p.name, path=p, data=p.read_bytes(), expected=oracle.get(p, ()),
                   mailman=mailman.get(p.name)) for p in files]
