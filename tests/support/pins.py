"""The version ranges pyproject.toml pins its dependencies to, for the tests that
check another library's private API is still the one a compat module was written
against (tests/unit/transports/smtp/test_aiosmtplib_compat.py,
tests/unit/db/test_sqlalchemy_compat.py, tests/unit/support/test_otel_compat.py)."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

Release = tuple[int, ...]


def release(text: str) -> Release:
    """"5.1.3" -> (5, 1, 3); a pre-release or local suffix is ignored."""
    return tuple(int(part) for part in re.findall(r"\d+", re.split(r"[a-z+]", text)[0])[:3])


def installed(distribution: str) -> Release:
    return release(version(distribution))


def pinned_range(distribution: str, extra: str | None = None) -> tuple[Release, Release]:
    """(lowest, first unsupported) of ``distribution`` in ``[project] dependencies``
    (or in the optional ``extra``), which must give both (``name>=A,<B``)."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    dependencies = (project["dependencies"] if extra is None
                    else project["optional-dependencies"][extra])
    for spec in dependencies:
        name = re.match(r"[A-Za-z0-9_.-]+", spec)
        if name is None or name.group(0).lower() != distribution.lower():
            continue
        lowest = re.search(r">=\s*([\d.]+)", spec)
        below = re.search(r"<\s*([\d.]+)", spec)
        if lowest is None or below is None:
            raise AssertionError(f"pyproject.toml: {spec!r} needs both >= and < bounds")
        return release(lowest.group(1)), release(below.group(1))
    raise AssertionError(f"pyproject.toml does not depend on {distribution}")


def shown(bound: Release) -> str:
    return ".".join(map(str, bound))
