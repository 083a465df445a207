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


def template_exists(templates_dir: Path, name: str, *, nested: bool = False) -> bool:
    """True when ``name`` is a valid name whose folder has subject.txt and text.txt.

    ``nested``: ``name`` is a locale variant (``invoice/es-MX``), checked part by part.
    """
    try:
        for part in name.split("/") if nested else [name]:
            validate_template_name(part)
    except ValueError:
        return False
    folder = templates_dir / name
    return (folder / SUBJECT_FILE).is_file() and (folder / TEXT_FILE).is_file()


_LOCALE_RE = re.compile(r"[A-Za-z]{2,3}(?:-[A-Za-z0-9]{1,8})*")
_MAX_LOCALE = 35


def validate_locale(locale: str) -> str:
    """``locale`` as a BCP 47 tag (``es-MX``, ``zh-Hant-TW``; ``_`` read as ``-``);
    ValueError for anything else. Its case is kept: it names a folder."""
    if not isinstance(locale, str) or not locale or len(locale) > _MAX_LOCALE:
        raise ValueError(f"locale must be 1-{_MAX_LOCALE} characters: {locale!r}")
    tag = locale.replace("_", "-")
    if not _LOCALE_RE.fullmatch(tag):
        raise ValueError(f"bad locale {locale!r}: use a BCP 47 tag such as es-MX")
    return tag


def variants(locale: str | None) -> list[str]:
    """The folders to try for ``locale``, most specific first, ending with the
    template's own folder (""): ``es-MX`` gives ``["es-MX", "es", ""]``."""
    if not locale:
        return [""]
    parts = locale.split("-")
    return ["-".join(parts[:n]) for n in range(len(parts), 0, -1)] + [""]


def variant_path(name: str, variant: str) -> str:
    """The folder of one variant, relative to the templates directory."""
    return f"{name}/{variant}" if variant else name


def resolve_variant(templates_dir: Path, name: str, locale: str | None) -> str | None:
    """The first variant of ``name`` for ``locale`` that exists (see :func:`variants`),
    as a folder relative to ``templates_dir``; None when none does."""
    for variant in variants(locale):
        if template_exists(templates_dir, variant_path(name, variant), nested=bool(variant)):
            return variant_path(name, variant)
    return None


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
