"""Params checked against the template variant at enqueue (issue 16 item 7, issue 14
item 13): every variable the variant and its includes use must be given, unless the
template tests it with ``is defined`` or gives it a ``default``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mailout import outbox
from mailout.exceptions import ConfigError, InvalidMessage
from mailout.message.template_params import check_params, required_params
from mailout.outbox import DEFAULT_TEMPLATES, EnqueueSettings


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def templates(tmp_path: Path) -> Path:
    return _write(tmp_path / "templates", {
        "order/subject.txt": "Order {{ order_id }}",
        "order/text.txt": ("{% for item in items %}{{ item.name }}{% endfor %}"
                           "{% set shown = total %}{{ shown }}{% include 'parts/footer.txt' %}"),
        "order/html.html": ("{% import 'parts/macros.html' as m %}{{ m.money(total) }}"
                            "{{ note | default('') }}{% if coupon is defined %}{{ coupon }}"
                            "{% endif %}{{ range(3) | list }}"),
        "order/es/subject.txt": "Pedido {{ order_id }} de {{ tienda }}",
        "order/es/text.txt": "{{ total }}",
        "parts/footer.txt": "Questions? {{ support_email }}",
        "parts/macros.html": "{% macro money(v) %}{{ v }} {{ currency }}{% endmacro %}",
        "broken/subject.txt": "{{ oops ",
        "broken/text.txt": "x",
    })


def test_the_variant_and_its_includes_and_imports_name_what_they_need(templates: Path) -> None:
    assert required_params(templates, "order") == {
        "order_id", "items", "total", "support_email", "currency"}
    assert required_params(templates, "order/es") == {"order_id", "tienda", "total"}


def test_a_missing_param_is_invalid_message_naming_it(templates: Path) -> None:
    given = {"order_id": 1, "items": [], "total": "9.99", "support_email": "s@x.example"}
    with pytest.raises(InvalidMessage, match="'currency'") as caught:
        check_params("order", required_params(templates, "order"), given)
    assert caught.value.field == "params"
    check_params("order", required_params(templates, "order"),
                 {**given, "currency": "EUR"})  # complete: no error


def test_default_and_is_defined_make_a_param_optional(templates: Path) -> None:
    needed = required_params(templates, "order")
    assert "note" not in needed
    assert "coupon" not in needed
    assert "range" not in needed  # a Jinja global
    assert "item" not in needed  # bound by the template's for loop
    assert "shown" not in needed  # and by its set


def test_a_template_that_does_not_parse_is_refused_at_enqueue(templates: Path) -> None:
    with pytest.raises(InvalidMessage, match=r"subject\.txt line 1") as caught:
        required_params(templates, "broken")
    assert caught.value.field == "template"


def test_an_edited_template_is_read_again(templates: Path) -> None:
    assert required_params(templates, "order/es") == {"order_id", "tienda", "total"}
    subject = templates / "order" / "es" / "subject.txt"
    subject.write_text("Pedido {{ order_id }}", encoding="utf-8")
    stat = subject.stat()
    os.utime(subject, (stat.st_atime, stat.st_mtime + 5))
    assert required_params(templates, "order/es") == {"order_id", "total"}


def test_enqueue_checks_in_the_workers_folder_unless_told_not_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    # No ./templates: still the folder looked in (a template there cannot be found).
    assert EnqueueSettings.from_env({}).templates_dir == Path(DEFAULT_TEMPLATES)
    (tmp_path / DEFAULT_TEMPLATES).mkdir()
    assert EnqueueSettings.from_env({}).templates_dir == Path(DEFAULT_TEMPLATES)
    explicit = EnqueueSettings.from_env({"MAILOUT_TEMPLATES": "/srv/mail"})
    assert explicit.templates_dir == Path("/srv/mail")
    for off in ("off", "false", "0"):
        assert EnqueueSettings.from_env({"MAILOUT_TEMPLATES_CHECK": off,
                                         "MAILOUT_TEMPLATES": "/srv/mail"}).templates_dir is None
    assert EnqueueSettings.from_env({"MAILOUT_TEMPLATES_CHECK": "on"}).templates_dir == \
        Path(DEFAULT_TEMPLATES)
    with pytest.raises(ConfigError, match="MAILOUT_TEMPLATES_CHECK"):
        EnqueueSettings.from_env({"MAILOUT_TEMPLATES_CHECK": "sometimes"})


def _bump(path: Path) -> None:
    """Move ``path``'s modification time on, as an edit a moment later would."""
    stat = path.stat()
    os.utime(path, (stat.st_atime, stat.st_mtime + 5))


def test_enqueues_look_a_template_up_once_until_a_file_that_decides_it_changes(
    templates: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = EnqueueSettings(templates_dir=templates)
    looked: list[str | None] = []
    real = outbox._find_template

    def counted(folder: Path, name: str, locale: str | None) -> outbox.Checked:
        looked.append(locale)
        return real(folder, name, locale)

    monkeypatch.setattr(outbox, "_find_template", counted)  # the real lookup, counted
    assert outbox._template("order", "es-MX", settings)[2] == "order/es"
    assert outbox._template("order", "es-MX", settings)[2] == "order/es"
    assert len(looked) == 1  # remembered
    _write(templates, {"order/es-MX/subject.txt": "{{ mx }}", "order/es-MX/text.txt": "x"})
    assert outbox._template("order", "es-MX", settings)[2:] == ("order/es-MX",
                                                                frozenset({"mx"}))
    _write(templates, {"order/meta.toml": "schema = 4"})  # the schema is the template's
    assert outbox._template("order", "es-MX", settings)[1] == 4
    (templates / "order" / "es-MX" / "text.txt").unlink()  # no longer a variant
    assert outbox._template("order", "es-MX", settings)[2] == "order/es"
    _write(templates, {"order/es/html.html": "{{ extra }}"})
    assert "extra" in outbox._template("order", "es-MX", settings)[3]
    _write(templates, {"order/meta.toml": "schema = 5"})  # the same size: the time tells
    _bump(templates / "order" / "meta.toml")
    assert outbox._template("order", "es-MX", settings)[1] == 5
    assert len(looked) == 6
    (templates / "order" / "es" / "subject.txt").unlink()
    (templates / "order" / "subject.txt").unlink()
    for _ in range(2):  # no variant left: refused on every call
        with pytest.raises(InvalidMessage):
            outbox._template("order", "es-MX", settings)
    assert len(looked) == 8
