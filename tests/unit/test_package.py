"""The package's public names resolve, lazily."""

from __future__ import annotations

import mailout


def test_every_public_name_resolves() -> None:
    for name in mailout.__all__:
        assert getattr(mailout, name) is not None


def test_errors_share_one_root_and_their_builtin() -> None:
    assert issubclass(mailout.InvalidMessage, mailout.MailoutError)
    assert issubclass(mailout.InvalidMessage, ValueError)
    assert issubclass(mailout.NotFound, LookupError)


def test_no_submodule_shadows_a_public_name() -> None:
    """Importing every submodule (as the CLI, the worker or an app may) leaves each
    public name bound to its function or class, never to a module of that name."""
    import importlib
    import pkgutil
    import types

    expected = {name: getattr(mailout, name) for name in mailout.__all__}
    for info in pkgutil.walk_packages(mailout.__path__, "mailout."):
        if ".migrations" in info.name or info.name in ("mailout.__main__",):
            continue  # Alembic scripts; the CLI entry point runs when imported
        try:
            importlib.import_module(info.name)
        except ImportError:
            continue  # an optional extra that is not installed
    for name, value in expected.items():
        now = getattr(mailout, name)
        assert not isinstance(now, types.ModuleType), f"mailout.{name} is a module now"
        assert now is value, f"mailout.{name} changed after importing the submodules"
    assert callable(mailout.enqueue)


def test_the_example_app_uses_only_the_public_api() -> None:
    """examples/order_app.py imports ``mailout`` and uses names from ``__all__`` only."""
    import ast
    from pathlib import Path

    source = Path(__file__).resolve().parents[2] / "examples" / "order_app.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            assert not node.module.startswith("mailout"), f"imports {node.module}"
        if isinstance(node, ast.Import):
            assert all(a.name == "mailout" or not a.name.startswith("mailout.")
                       for a in node.names)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "mailout":
            assert node.attr in mailout.__all__, f"mailout.{node.attr} is not public"


def test_the_public_api_is_exactly_these_names() -> None:
    """Moving modules inside the package changes none of what applications import."""
    assert sorted(mailout.__all__) == [
        "Attachment", "ConfigError", "EnqueueResult", "EnqueueSettings",
        "IdempotencyConflict", "InvalidMessage", "Mailbox", "MailoutError", "Message",
        "NotFound", "NotifyMode", "Outcome", "RenderError", "SchemaMissing", "Status",
        "TemplateNotFound", "__version__",
        "count_messages", "enqueue", "enqueue_async", "enqueue_many", "enqueue_many_async",
        "upgrade_database",
    ]


def test_documented_import_paths_that_moved_still_work() -> None:
    """The Django view and fixtures moved under mailout.contrib.django; the paths the
    docs gave before still import the same objects."""
    from mailout.contrib.django import testing, webhooks
    from mailout.testing import django as old_testing
    from mailout.webhooks import django as old_webhooks

    assert old_webhooks.webhook_view is webhooks.webhook_view
    assert old_testing.outbox is testing.outbox
    assert old_testing.DjangoOutbox is testing.DjangoOutbox
