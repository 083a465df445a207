"""The params a template variant needs, found at enqueue so that a missing one is an
:class:`~mailout.exceptions.InvalidMessage` there and not a render error at send time.

The names come from Jinja2's ``meta.find_undeclared_variables`` over the variant's
``subject.txt``, ``text.txt`` and ``html.html`` and, recursively, every template
they include, import or extend by a constant name. A name is optional (not
required) when the template tests it with ``is defined``/``is undefined`` or gives
it a ``default``: with the renderer's ``StrictUndefined`` those are the only ways a
missing param renders. Jinja's own globals (``range``, ``namespace``...) are never
required.

Jinja2 is imported on the first check, not with the enqueue module. Results are
cached per variant folder and the modification times of its files; a change to an
included file alone is seen after a restart, as by the worker.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from mailout.exceptions import InvalidMessage
from mailout.templates import HTML_FILE, SUBJECT_FILE, TEXT_FILE

if TYPE_CHECKING:
    import jinja2
    from jinja2 import nodes

_FILES = (SUBJECT_FILE, TEXT_FILE, HTML_FILE)
_OPTIONAL_TESTS = frozenset({"defined", "undefined"})
_OPTIONAL_FILTERS = frozenset({"default", "d"})
_MAX_TEMPLATES = 100  # includes followed per variant: a cycle or a maze ends here


def required_params(templates_dir: Path, folder: str) -> frozenset[str]:
    """The params the variant in ``folder`` (relative to ``templates_dir``) cannot
    render without. Raises InvalidMessage (field ``template``) when one of its
    files, or a template it includes, does not parse or cannot be read."""
    stamps = tuple(_mtime(templates_dir / folder / name) for name in _FILES)
    return _required(templates_dir, folder, stamps)


def check_params(folder: str, needed: frozenset[str], given: object) -> None:
    """Raise InvalidMessage (field ``params``) naming each of ``needed`` (the
    variant's :func:`required_params`) that ``given`` (the params mapping) lacks."""
    if not needed:
        return
    keys = given.keys() if isinstance(given, dict) else ()
    missing = sorted(needed.difference(keys))
    if missing:
        names = ", ".join(repr(m) for m in missing)
        raise InvalidMessage("params", f"template {folder!r} uses {names}, missing from params "
                             "(give it, or use `default` or `is defined` in the template)")


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


@functools.lru_cache(maxsize=256)
def _required(templates_dir: Path, folder: str,
              stamps: tuple[float | None, ...]) -> frozenset[str]:
    del stamps  # part of the cache key only: an edited file is read again
    env = _environment(templates_dir)
    needed: set[str] = set()
    optional: set[str] = set()
    seen: set[str] = set()
    pending = [f"{folder}/{name}" for name in _FILES]
    while pending and len(seen) < _MAX_TEMPLATES:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        tree = _parse(env, folder, name)
        if tree is None:
            continue
        from jinja2 import meta

        needed |= meta.find_undeclared_variables(tree)
        optional |= set(_guarded_names(tree))
        pending += [ref for ref in meta.find_referenced_templates(tree) if ref is not None]
    return frozenset(needed - optional - set(env.globals))


def _parse(env: jinja2.Environment, folder: str, name: str) -> nodes.Template | None:
    """The parsed template ``name``; None when it does not exist (html.html is
    optional; a missing include is the renderer's to report)."""
    import jinja2

    assert env.loader is not None  # built with a FileSystemLoader
    try:
        source, _, _ = env.loader.get_source(env, name)
        return env.parse(source)
    except jinja2.TemplateNotFound:
        return None
    except jinja2.TemplateSyntaxError as exc:
        raise InvalidMessage("template", f"{name} line {exc.lineno}: {exc.message}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidMessage("template", f"{name} cannot be read: {exc}") from None


def _guarded_names(tree: nodes.Template) -> Iterator[str]:
    """Names the template tests with ``is defined`` or gives a ``default``."""
    from jinja2 import nodes

    for test in tree.find_all(nodes.Test):
        if test.name in _OPTIONAL_TESTS and isinstance(test.node, nodes.Name):
            yield test.node.name
    for flt in tree.find_all(nodes.Filter):
        if flt.name in _OPTIONAL_FILTERS and isinstance(flt.node, nodes.Name):
            yield flt.node.name


@functools.lru_cache(maxsize=8)
def _environment(templates_dir: Path) -> jinja2.Environment:
    """An environment like the renderer's, for parsing only (nothing is rendered)."""
    import jinja2

    return jinja2.Environment(loader=jinja2.FileSystemLoader(templates_dir),
                              undefined=jinja2.StrictUndefined, autoescape=True)
