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

:func:`lookup` remembers, per template and locale, which variant enqueue renders, its
schema and its params, for as long as none of the files that decide them changes
(checked with one ``stat`` each, far cheaper than finding them again: docs/capacity.md,
"Figures behind choices in the code").
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from mailout.exceptions import InvalidMessage
from mailout.message.templates import (
    HTML_FILE,
    META_FILE,
    SUBJECT_FILE,
    TEXT_FILE,
    variant_path,
    variants,
)
from mailout.support.bounded_cache import BoundedCache

if TYPE_CHECKING:
    import jinja2
    from jinja2 import nodes

_FILES = (SUBJECT_FILE, TEXT_FILE, HTML_FILE)
_OPTIONAL_TESTS = frozenset({"defined", "undefined"})
_OPTIONAL_FILTERS = frozenset({"default", "d"})
_MAX_TEMPLATES = 100  # includes followed per variant: a cycle or a maze ends here
_T = TypeVar("_T")
_Stamp = tuple[int, int, int, int] | None
# (folder, template, locale) -> (the files that decide the lookup, their stamps,
# result); a process enqueues a bounded set of templates, so few are ever dropped.
_LOOKUPS: BoundedCache[tuple[Path, str, str | None],
                       tuple[list[str], list[_Stamp], object]] = BoundedCache(1024)


def lookup(templates_dir: Path, template: str, locale: str | None,
           find: Callable[[], _T]) -> _T:
    """``find()`` (which variant of ``template`` renders ``locale``, its schema and
    params), remembered until a file that decides it changes: each candidate
    variant's subject, text and html, and the template's meta.toml. A file counts as
    changed when its type, size, inode or modification time in nanoseconds does (a
    rewrite to the same size within the file system's clock tick is missed until the
    next change). What ``find`` raises is not remembered."""
    key = (templates_dir, template, locale)
    hit = _LOOKUPS.get(key)
    if hit is not None and _stamps(hit[0]) == hit[1]:
        return hit[2]  # type: ignore[return-value]  # find's result for this key
    paths = [os.path.join(templates_dir, template, META_FILE)]
    for variant in variants(locale):
        folder = os.path.join(templates_dir, variant_path(template, variant))
        paths += [os.path.join(folder, name) for name in _FILES]
    before = _stamps(paths)  # taken first: a change during find() is seen next time
    found = find()
    _LOOKUPS.put(key, (paths, before, found))
    return found


def _stamps(paths: list[str]) -> list[_Stamp]:
    stamps: list[_Stamp] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            stamps.append(None)
        else:
            stamps.append((st.st_mode, st.st_size, st.st_ino, st.st_mtime_ns))
    return stamps


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
