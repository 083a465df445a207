"""Template folders: names, files, and the payload schema a template declares.

A template is a folder under the templates directory: ``subject.txt``, ``text.txt``,
an optional ``html.html`` and an optional ``meta.toml`` (``schema = 2``). These rules
are shared by enqueue (which checks a template exists) and the worker (which renders
it); this module needs no Jinja2, so the enqueue path does not import it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

SUBJECT_FILE = "subject.txt"
TEXT_FILE = "text.txt"
HTML_FILE = "html.html"
META_FILE = "meta.toml"

_TEMPLATE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_MAX_TEMPLATE_NAME = 100


def validate_template_name(name: str) -> None:
    """Raise ValueError unless ``name`` is a safe template folder name.

    Allowed: 1-100 characters from ``[A-Za-z0-9_.-]``, not starting with a dot,
    never containing "..". So no path separators, no way out of the folder.
    """
    if not isinstance(name, str) or not name or len(name) > _MAX_TEMPLATE_NAME:
        raise ValueError(f"template name must be 1-{_MAX_TEMPLATE_NAME} characters: {name!r}")
    if ".." in name or not _TEMPLATE_NAME_RE.fullmatch(name):
        raise ValueError(
            f"bad template name {name!r}: use letters, digits, '_', '.' and '-', "
            "with no leading dot and no '..'"
        )


def template_exists(templates_dir: Path, name: str) -> bool:
    """True when ``name`` is a valid name whose folder has subject.txt and text.txt."""
    try:
        validate_template_name(name)
    except ValueError:
        return False
    folder = templates_dir / name
    return (folder / SUBJECT_FILE).is_file() and (folder / TEXT_FILE).is_file()


def template_schema(templates_dir: Path, template: str) -> int | None:
    """The ``schema`` declared in ``<template>/meta.toml``, or None."""
    meta = templates_dir / template / META_FILE
    if not meta.is_file():
        return None
    try:
        value = tomllib.loads(meta.read_text(encoding="utf-8")).get("schema")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def known_schemas(templates_dir: Path) -> dict[str, int]:
    """Every template's declared schema version, read once at worker start."""
    if not templates_dir.is_dir():
        return {}
    found = {}
    for folder in templates_dir.iterdir():
        version = template_schema(templates_dir, folder.name)
        if version is not None:
            found[folder.name] = version
    return found
