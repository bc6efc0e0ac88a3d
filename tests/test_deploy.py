"""The files in ``deploy/``: Prometheus alert rules and a Grafana dashboard, checked in CI.

The rules are checked by ``promtool check rules`` where it is installed (Debian's
``prometheus`` package; CI installs it and sets ``LEDGERFLOW_TEST_PROMTOOL``, so there it must
run), and always parsed here: each rule is complete, and every metric a rule or a panel names
is one Ledgerflow exports (``ledgerflow.runtime.metrics``), so a renamed metric cannot leave a
silent alert behind. ``docs/observability.md`` must list every metric too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from ledgerflow.runtime.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy" / "prometheus" / "ledgerflow-alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "ledgerflow-dashboard.json"
DOCS = ROOT / "docs" / "observability.md"
NAMED = re.compile(r"\bledgerflow_[a-z_]+\b")
# The consistency signals the issue asks alerts for, by the metric each rests on.
REQUIRED_ALERTS = {
    "ledgerflow_unknown_outcome_oldest_age_seconds",
    "ledgerflow_parked_instances",
    "ledgerflow_stale_writes_refused_total",
    "ledgerflow_claim_lag_seconds_bucket",
}


def exported() -> dict[str, set[str]]:
    """Each metric family Ledgerflow declares -> the sample names Prometheus stores for it."""
    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
    families = Metrics(CollectorRegistry()).registry.collect()
    return {f.name: {f.name + s for s in suffixes[f.type]} for f in families}


def documented() -> set[str]:
    """Each metric as a person writes it: a counter with ``_total``, others by their name."""
    return {min(names) if len(names) == 1 else family for family, names in exported().items()}


def samples() -> set[str]:
    return {name for names in exported().values() for name in names}


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_alert_rules_are_complete_and_name_only_exported_metrics() -> None:
    """Goal: every rule has a name, an expression, a severity and a summary; every metric in
    an expression exists; the consistency signals each have an alert."""
    found = rules()
    assert found
    named: set[str] = set()
    for rule in found:
        assert re.fullmatch(r"Ledgerflow[A-Za-z]+", rule["alert"]), rule
        assert rule["labels"]["severity"] in {"page", "ticket"}, rule
        assert rule["annotations"]["summary"], rule
        metrics = set(NAMED.findall(rule["expr"]))
        assert metrics, rule
        assert metrics <= samples(), f"{rule['alert']}: unknown {metrics - samples()}"
        named |= metrics
    assert named >= REQUIRED_ALERTS
    assert len({rule["alert"] for rule in found}) == len(found)


def test_the_dashboard_shows_only_exported_metrics() -> None:
    """Goal: the dashboard is Grafana JSON whose every panel queries exported metrics only,
    through the datasource variable; together they show every metric family."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["uid"]
    assert dashboard["title"]
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource"]
    shown: set[str] = set()
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            metrics = set(NAMED.findall(target["expr"]))
            assert metrics, panel["title"]
            assert metrics <= samples(), f"{panel['title']}: unknown {metrics - samples()}"
            shown |= metrics
    families = exported()
    assert {name for name, names in families.items() if names & shown} == set(families)


def test_the_docs_list_every_metric() -> None:
    """Goal: docs/observability.md names every metric Ledgerflow exports, and no other."""
    text = DOCS.read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `(ledgerflow_[a-z_]+)`", text, flags=re.MULTILINE))
    assert listed == documented()


def _promtool() -> str | None:
    wanted = os.environ.get("LEDGERFLOW_TEST_PROMTOOL")
    if wanted:
        assert Path(wanted).is_file(), f"LEDGERFLOW_TEST_PROMTOOL={wanted} is not a file"
        return wanted
    return shutil.which("promtool")


def test_promtool_accepts_the_rules() -> None:
    """Goal: Prometheus itself accepts the rules file (``promtool check rules``)."""
    promtool = _promtool()
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    checked = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout
