"""The package layout holds: no import cycles, and each boundary imports only what it may.

Imports are read from the source with ``ast`` (module-level and function-level alike,
``TYPE_CHECKING`` blocks excluded: those never run), so a lazy import cannot hide a
dependency the layout forbids.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "mailout"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, known: set[str]) -> Iterator[str]:
    """Every mailout module ``tree`` imports (a name imported from a package counts as
    the submodule when there is one)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            node.body = []  # never executed at run time
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("mailout"):
                    yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:
                base = ".".join([*module.split(".")[:-node.level], node.module])
            if not base.startswith("mailout"):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                yield candidate if candidate in known else base


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[name] = {m for m in _imports(tree, name, known) if m != name and m in known}
    return graph


GRAPH = _graph()


def _package_of(module: str) -> str:
    """The boundary a module belongs to: ``mailout.db``, ``mailout.transports``... or
    the module itself for the flat domain."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_there_is_no_import_cycle() -> None:
    # Lazy (function-level) imports count too: one that closes a loop only hides it.
    graph = {name: set(deps) for name, deps in GRAPH.items()}
    # Every module that imports a package runs its __init__ too.
    # (A package's own submodules are not counted: it is being initialised already.)
    for node, deps in graph.items():
        for dep in list(deps):
            parts = dep.split(".")
            parents = (".".join(parts[:i]) for i in range(2, len(parts)))
            deps.update(p for p in parents if p in graph and not
                        (node == p or node.startswith(p + ".")))
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycle = [*stack[stack.index(dep):], dep]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


# boundary -> boundaries it must never import (lazy imports included)
FORBIDDEN = {
    "mailout.db": {"mailout.worker", "mailout.transports", "mailout.cli", "mailout.metrics",
                   "mailout.render", "mailout.attempt", "mailout.web", "mailout.webhooks"},
    "mailout.transports": {"mailout.db", "mailout.worker", "mailout.cli", "mailout.metrics",
                           "mailout.attempt", "mailout.outbox", "mailout.web"},
    "mailout.outbox": {"mailout.worker", "mailout.transports", "mailout.cli",
                        "mailout.metrics", "mailout.render", "mailout.attempt"},
    "mailout.metrics": {"mailout.worker", "mailout.cli", "mailout.transports"},
    "mailout.worker": {"mailout.cli"},
    "mailout.webhooks": {"mailout.worker", "mailout.transports", "mailout.cli",
                         "mailout.render", "mailout.attempt", "mailout.metrics"},
    "mailout.dsn": {"mailout.db", "mailout.worker", "mailout.transports", "mailout.cli"},
    "mailout.events": {"mailout.db", "mailout.worker", "mailout.transports", "mailout.cli"},
    # The console reads and acts through mailout.db only, and renders with render.py.
    "mailout.web": {"mailout.worker", "mailout.cli", "mailout.metrics", "mailout.attempt",
                    "mailout.outbox", "mailout.config", "mailout.transports.smtp"},
}
# Plain records and pure helpers: they import nothing of mailout's.
LEAVES = ("mailout.models", "mailout.exceptions", "mailout.timeutil")


def _reaches(start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others, lazily or not."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for dep in GRAPH.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


@pytest.mark.parametrize("boundary", sorted(FORBIDDEN))
def test_each_boundary_imports_only_what_it_may(boundary: str) -> None:
    members = [m for m in GRAPH if m == boundary or m.startswith(boundary + ".")]
    assert members, f"no module {boundary}"
    forbidden = FORBIDDEN[boundary]
    for member in members:
        for dep in _reaches(member):
            bad = [f for f in forbidden if dep == f or dep.startswith(f + ".")]
            assert not bad, f"{member} reaches {dep}, which {boundary} must not import"


@pytest.mark.parametrize("leaf", LEAVES)
def test_leaves_import_nothing_of_mailout(leaf: str) -> None:
    assert GRAPH[leaf] == set()


def test_every_subpackage_says_what_it_owns_and_may_import() -> None:
    for init in PACKAGE.rglob("__init__.py"):
        if "migrations" in init.parts or init.parent == PACKAGE:
            continue
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        assert "import" in doc.lower(), f"{init} does not say what it may import"


def test_the_enqueue_path_stays_cheap() -> None:
    """``import mailout.outbox`` loads no worker, transport, CLI, Jinja2 or Rich code."""
    import subprocess
    import sys

    code = ("import sys, mailout, mailout.outbox; mailout.Message; "
            "print(' '.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True).stdout.split())
    heavy = {"jinja2", "rich", "aiosmtplib", "click", "alembic", "prometheus_client",
             "mailout.worker", "mailout.transports", "mailout.cli", "mailout.metrics",
             "mailout.render", "mailout.guards", "mailout.attempt"}
    assert not loaded & heavy


def test_the_worker_never_imports_rich() -> None:
    import subprocess
    import sys

    code = ("import sys, mailout.worker.build, mailout.worker.supervisor; "
            "print(' '.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True).stdout.split())
    assert "rich" not in loaded


# Packages that integrate mailout with something else: they may use all of mailout,
# but nothing of mailout's own may import them (core works without Django installed).
INTEGRATIONS = ("mailout.contrib", "mailout.testing")


@pytest.mark.parametrize("integration", INTEGRATIONS)
def test_core_never_imports_an_integration(integration: str) -> None:
    def inside(module: str, package: str) -> bool:
        return module == package or module.startswith(package + ".")

    for module in GRAPH:
        if any(inside(module, p) for p in INTEGRATIONS):
            continue
        bad = [dep for dep in _reaches(module) if inside(dep, integration)]
        assert not bad, f"{module} reaches {bad[0]}: core must not import {integration}"
