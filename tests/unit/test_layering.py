"""The package layout holds: no import cycles, layers imported top down only, and each
boundary imports only what it may.

Imports are read from the source with ``ast`` (module-level and function-level alike),
so a lazy import cannot hide a dependency the layout forbids. ``TYPE_CHECKING`` blocks
never run, so they cannot close a cycle; they still count against the layers.
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


def _imports(tree: ast.AST, module: str, known: set[str],
             type_checking: bool = False) -> Iterator[str]:
    """Every mailout module ``tree`` imports (a name imported from a package counts as
    the submodule when there is one); ``TYPE_CHECKING`` blocks only if asked."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node) and not type_checking:
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


def _graph(*, type_checking: bool = False) -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[name] = {m for m in _imports(tree, name, known, type_checking)
                       if m != name and m in known}
    return graph


GRAPH = _graph()
SUBPACKAGES = {p.parent.name for p in PACKAGE.glob("*/__init__.py")} | {
    p.stem for p in PACKAGE.glob("*.py")}


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


# The layers, top down. A module may import its own package, any package of a lower
# layer, and, across the packages of its own layer, only the pairs in SAME_LAYER. The
# root package ``mailout`` imports nothing when it is imported (its public names load
# on first use), so it sits at the bottom: code inside the package imports only
# ``__version__`` from it.
LAYERS = (
    ("entry points", ("mailout.cli", "mailout.web", "mailout.contrib", "mailout.testing",
                      "mailout.__main__")),
    ("worker and metrics", ("mailout.worker", "mailout.metrics")),
    ("webhooks and outbox", ("mailout.webhooks", "mailout.outbox")),
    ("delivery and feedback", ("mailout.delivery", "mailout.feedback")),
    ("db and transports", ("mailout.db", "mailout.transports")),
    ("message and support", ("mailout.message", "mailout.support")),
    ("models and exceptions", ("mailout.models", "mailout.exceptions", "mailout")),
)
# importer package -> imported package, inside one layer: each with its reason.
SAME_LAYER = {
    ("mailout.__main__", "mailout.cli"): "python -m mailout runs the CLI",
    ("mailout.cli", "mailout.web"): "`mailout web` serves the console",
    ("mailout.contrib", "mailout.cli"): "`manage.py mailout` runs the CLI's commands",
    ("mailout.contrib", "mailout.testing"): "the Django fixtures extend mailout.testing's Outbox",
    ("mailout.worker", "mailout.metrics"): "a worker reports to its observer and serves metrics",
    ("mailout.message", "mailout.support"): "template lookups are kept in a BoundedCache",
}
# Documented import paths kept after their module moved: each only re-exports the new one.
ALIASES = {
    "mailout.webhooks.django": "mailout.contrib.django.webhooks",
    "mailout.testing.django": "mailout.contrib.django.testing",
}
# Narrower than the layers: package -> what it must not reach, directly or not.
FORBIDDEN = {
    # Enqueue runs in the application's transaction: no transport, no rendering.
    "mailout.outbox": {"mailout.transports", "mailout.message.render", "mailout.delivery.attempt",
                       "mailout.delivery.guards"},
    "mailout.metrics": {"mailout.transports"},
    # Receivers store events; they never send or render.
    "mailout.webhooks": {"mailout.transports", "mailout.message.render",
                         "mailout.delivery.attempt", "mailout.metrics"},
    # Parsing reports and events is pure: no database.
    "mailout.feedback.dsn": {"mailout.db", "mailout.transports"},
    "mailout.feedback.events": {"mailout.db", "mailout.transports"},
    # The console reads and acts through mailout.db only, and renders with render.py.
    "mailout.web": {"mailout.worker", "mailout.cli", "mailout.metrics", "mailout.delivery.attempt",
                    "mailout.outbox", "mailout.transports.smtp"},
}
# Plain records and pure helpers: they import nothing of mailout's.
LEAVES = ("mailout.models", "mailout.exceptions", "mailout.support.timeutil",
          "mailout.support.bounded_cache", "mailout.support._otel_compat")


def _layer_of(module: str) -> tuple[int, str]:
    """(layer index, package) of ``module``: the longest package of LAYERS it is in."""
    found = [(len(p), i, p) for i, (_, packages) in enumerate(LAYERS) for p in packages
             if module == p or module.startswith(p + ".")]
    assert found, f"{module} is in no layer: add its package to LAYERS"
    _, index, package = max(found)
    return index, package


TYPED_GRAPH = _graph(type_checking=True)


def test_every_module_is_in_a_layer() -> None:
    for module in TYPED_GRAPH:
        _layer_of(module)


def test_each_module_imports_only_its_layer_or_lower() -> None:
    """Type-only imports count: a type from a higher layer is a dependency on it too."""
    found = set()
    for module, deps in TYPED_GRAPH.items():
        if module in ALIASES or module == "mailout":
            continue  # the root names its lazily loaded public API for type checkers
        mine, package = _layer_of(module)
        for dep in deps:
            theirs, other = _layer_of(dep)
            if other == package or theirs > mine or (package, other) in SAME_LAYER:
                continue
            found.add((module, dep))
    assert not found, "imports against the layers: " + ", ".join(
        f"{a} -> {b}" for a, b in sorted(found))


def test_the_root_package_is_imported_for_its_version_only() -> None:
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "mailout" and not node.level:
                names = {a.name for a in node.names} - set(SUBPACKAGES)
                assert names <= {"__version__"}, f"{module} imports {names} from mailout"


def test_aliases_only_reexport_their_new_home() -> None:
    for alias, home in ALIASES.items():
        assert GRAPH[alias] == {home}, f"{alias} should import only {home}"


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
        if member in ALIASES:
            continue
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
             "mailout.message.render", "mailout.delivery.guards", "mailout.delivery.attempt"}
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
        if any(inside(module, p) for p in INTEGRATIONS) or module in ALIASES:
            continue
        bad = [dep for dep in _reaches(module) if inside(dep, integration)]
        assert not bad, f"{module} reaches {bad[0]}: core must not import {integration}"


def test_the_benchmarks_never_import_the_test_suite() -> None:
    """``bench/`` runs without ``tests/``: the harnesses both use live in ``bench/support``
    (or, where they are public, in ``mailout.testing``)."""
    bench = SRC.parent / "bench"
    offenders = []
    for path in sorted(bench.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(bench.parent)}: {n}" for n in names
                          if n == "tests" or n.startswith("tests.")]
    assert offenders == []


def test_only_the_db_package_asks_which_database_it_is() -> None:
    """Outside ``mailout.db`` code asks the connection's store
    (``mailout.db.stores.store_for``), never the dialect: no import of
    ``mailout.db.dialects`` and no reading of a dialect's or URL's backend name."""
    asking = ("dialect.name", "get_backend_name(", "drivername")
    offenders = sorted(
        name for name, path in _modules().items()
        if name != "mailout.db" and not name.startswith("mailout.db.")
        and ("mailout.db.dialects" in GRAPH[name]
             or any(word in path.read_text(encoding="utf-8") for word in asking)))
    assert not offenders, f"these modules ask which database it is: {offenders}"
