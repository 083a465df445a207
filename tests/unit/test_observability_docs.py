"""The shipped alert rules and Grafana dashboard parse and use only real metric names.

PyYAML is not a dependency: when it is missing, docs/alerts.yml is read with the small
parser below, which knows the YAML subset a rule file needs (block mappings and
sequences, quoted and plain scalars, ``|`` and ``>`` block scalars, comments) and
refuses anything else.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any, cast

import pytest
from prometheus_client.metrics_core import Metric
from sqlalchemy import create_engine

from mailout.metrics.collectors import AlertCollector, QueueCollector
from mailout.metrics.prometheus import METRIC_NAMES, PrometheusObserver

DOCS = Path(__file__).resolve().parents[2] / "docs"
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "info": ("_info",),
}


def exposed_names() -> set[str]:
    """Every series name a worker's /metrics can show, from the collectors themselves."""
    families: list[Metric] = list(PrometheusObserver().registry.collect())
    families += QueueCollector(create_engine("sqlite://"), ["default"]).describe()
    families += AlertCollector(cast(Any, None)).describe()  # describe() needs no worker
    names = set()
    for family in families:
        names.add(family.name)
        names.update(family.name + s for s in SUFFIXES.get(family.type, ()))
    return names


def metrics_in(expr: str) -> set[str]:
    return set(re.findall(r"\bmailout_[a-z_]+\b", expr))


def test_the_metric_name_list_matches_the_collectors() -> None:
    bases = {n for n in exposed_names() if not n.endswith(("_total", "_bucket", "_sum",
                                                           "_count", "_created", "_info"))}
    assert bases | {"mailout_worker"} >= METRIC_NAMES
    assert "mailout_worker_info" in exposed_names()


# -- a YAML subset, for when PyYAML is not installed -----------------------------------

def _strip_comment(line: str) -> str:
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _scalar(text: str) -> Any:
    text = text.strip()
    if text.startswith('"'):
        return json.loads(text)  # YAML double-quoted escapes are JSON's, for our purposes
    if text.startswith("'"):
        assert text.endswith("'"), text
        return text[1:-1].replace("''", "'")
    if text[:1] in "[{&*!|>%@`":
        raise ValueError(f"unsupported YAML: {text!r}")
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return {"true": True, "false": False, "null": None, "~": None}.get(text, text)


class MiniYaml:
    def __init__(self, source: str) -> None:
        self.raw = source.splitlines()
        self.lines = [(len(s) - len(s.lstrip(" ")), s.strip()) for s in
                      (_strip_comment(x) for x in self.raw) if s.strip()]
        self.i = 0

    def parse(self) -> Any:
        value = self.block(self.lines[0][0])
        assert self.i == len(self.lines), f"unparsed from {self.lines[self.i]}"
        return value

    def block(self, indent: int) -> Any:
        if self.lines[self.i][1].startswith("- "):
            return self.sequence(indent)
        return self.mapping(indent)

    def sequence(self, indent: int) -> list[Any]:
        items = []
        while self.i < len(self.lines) and self.lines[self.i][0] == indent \
                and self.lines[self.i][1].startswith("- "):
            # "- key: v" continues as a mapping two columns in.
            self.lines[self.i] = (indent + 2, self.lines[self.i][1][2:].strip())
            items.append(self.block(indent + 2))
        return items

    def mapping(self, indent: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        while self.i < len(self.lines) and self.lines[self.i][0] == indent:
            line = self.lines[self.i][1]
            match = re.fullmatch(r"([A-Za-z_][\w.-]*):(?: (.*))?", line)
            assert match, f"not a mapping entry: {line!r}"
            key, rest = match.group(1), (match.group(2) or "").strip()
            assert key not in out, f"duplicate key {key}"
            self.i += 1
            if rest in ("|", "|-", ">", ">-"):
                out[key] = self.block_scalar(indent, rest)
            elif rest:
                out[key] = _scalar(rest)
            else:
                assert self.lines[self.i][0] > indent, f"empty value for {key}"
                out[key] = self.block(self.lines[self.i][0])
        return out

    def block_scalar(self, indent: int, style: str) -> str:
        parts = []
        while self.i < len(self.lines) and self.lines[self.i][0] > indent:
            parts.append(self.lines[self.i][1])
            self.i += 1
        text = ("\n" if style.startswith("|") else " ").join(parts)
        return text if style.endswith("-") else text + "\n"


def load_yaml(path: Path) -> Any:
    source = path.read_text()
    mini = MiniYaml(source).parse()
    try:
        yaml = importlib.import_module("yaml")  # optional: not a dependency
    except ImportError:
        return mini
    full = yaml.safe_load(source)
    assert full == mini  # the subset parser agrees with the real one
    return full


# -- the shipped files -----------------------------------------------------------------

def test_alert_rules_parse_and_use_existing_metrics() -> None:
    rules_file = load_yaml(DOCS / "alerts.yml")
    names = exposed_names()
    (group,) = rules_file["groups"]
    assert group["name"] == "mailout"
    alerts = {r["alert"]: r for r in group["rules"]}
    assert {"MailoutOldestDueMessageTooOld", "MailoutDeadLetters", "MailoutTransportPaused",
            "MailoutNoWorker"} <= set(alerts)
    for name, rule in alerts.items():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, name
        assert rule["labels"]["severity"] in ("page", "ticket"), name
        assert rule["annotations"]["summary"], name
        if "for" in rule:
            assert re.fullmatch(r"\d+[smh]", rule["for"]), name
        used = metrics_in(rule["expr"])
        assert used, f"{name} uses no mailout metric"
        assert used <= names, f"{name} uses unknown metrics {used - names}"
        assert rule["expr"].count("(") == rule["expr"].count(")"), name


def test_the_dashboard_is_valid_json_and_uses_existing_metrics() -> None:
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    names = exposed_names()
    assert dashboard["title"] == "mailout"
    assert dashboard["panels"]
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    used = set().union(*(metrics_in(e) for e in exprs))
    assert used <= names, f"unknown metrics {used - names}"
    bases = {re.sub(r"_(total|bucket|info)$", "", n) for n in used}
    for must in ("mailout_queue_messages", "mailout_queue_oldest_due_age_seconds",
                 "mailout_sends", "mailout_delivery_latency_seconds",
                 "mailout_transport_paused"):
        assert must in bases, f"the dashboard does not show {must}"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("bad", ["key: [1, 2]", "key: {a: 1}", "key: &anchor x"])
def test_the_yaml_subset_refuses_what_it_does_not_know(bad: str) -> None:
    with pytest.raises(ValueError, match="unsupported"):
        MiniYaml(bad).parse()


def test_the_yaml_subset() -> None:
    doc = MiniYaml(
        "# c\n"
        "a:\n"
        "  - name: x  # trailing\n"
        "    n: 3\n"
        "    s: 'it''s # not a comment'\n"
        "  - b: \"q: {{ $v }}\"\n"
        "c: >-\n"
        "  one\n"
        "  two\n"
        "d: plain text\n"
    ).parse()
    assert doc == {"a": [{"name": "x", "n": 3, "s": "it's # not a comment"},
                         {"b": "q: {{ $v }}"}], "c": "one two", "d": "plain text"}
