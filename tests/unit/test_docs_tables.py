"""Markdown tables in the README and docs end with a blank line: a paragraph right
after a table's last row is read as one more row and disappears (issue 14, item 15)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "examples").glob("*.md"))]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_table_ends_with_a_blank_line(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    fenced = False
    for number, (line, following) in enumerate(itertools.pairwise(lines), 1):
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("|"):
            continue
        assert following.startswith("|") or not following.strip(), (
            f"{path.name}:{number + 1}: text right after a table row joins the table")
