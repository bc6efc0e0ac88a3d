"""Structured logs: the scripted run's worker (``LEDGERFLOW_LOG_FORMAT=json``) writes one JSON
object per line, each with its level, UTC time and ids, and every failure path of the run has
its line, once."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

import pytest
from scripted_run import ScriptedRun

pytestmark = pytest.mark.slow

# (business key, level, what the message says, the id fields it must carry)
EXPECTED = [
    ("r-1", "WARNING", r"^taking over instance", {"worker", "generation"}),
    ("r-1", "WARNING", r"^effect inventory\.reserve .* outcome UNKNOWN", {"effect", "key"}),
    ("r-1", "INFO", r"^effect inventory\.reserve .* UNKNOWN outcome settled: lookup", {"key"}),
    ("l-1", "WARNING", r"^effect legacy\.apply .* outcome UNKNOWN", {"effect", "key"}),
    ("l-1", "ERROR", r"^instance parked for a person \(effect_outcome_unknown\)", {"worker"}),
    ("c-1", "ERROR", r"^step 2 \(check_stock\) failed after 1 attempt", {"step"}),
    ("c-1", "WARNING", r"^instance ended COMPENSATED", {"worker"}),
    ("f-1", "WARNING", r"^step 1 \(count\) will retry .*ConnectionError", {"step"}),
    ("p-1", "ERROR", r"^effect books\.post .* failed: participant proved not applied", {"key"}),
    ("p-1", "WARNING", r"^instance ended FAILED", {"worker"}),
]
IDENTITY = {"tenant", "workflow", "version", "instance", "run"}


def test_json_lines_carry_level_time_and_ids(scripted: ScriptedRun) -> None:
    """Goal: every line the worker wrote is a JSON object with a level, a UTC ISO 8601 time and
    a message; a line about an instance names it, and nothing logs a payload.

    Method: parse every stderr line; check the fields and that no input of the run (the
    SKUs, amounts) appears in any line.
    """
    records = [json.loads(line) for line in scripted.lines]
    assert len(records) >= len(EXPECTED)
    for record in records:
        assert record["level"] in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}
        assert record["time"].endswith("Z")
        assert datetime.fromisoformat(record["time"]).utcoffset() is not None
        assert isinstance(record["message"], str)
    everything = "\n".join(scripted.lines)
    for payload in ('"sku"', '"amount"', '"what"', '"entry"'):
        assert payload not in everything


def test_every_failure_path_is_logged_once_with_its_ids(scripted: ScriptedRun) -> None:
    """Goal: a takeover, an UNKNOWN outcome and its settling, a park, a step failure, a retry,
    an effect refused for good and the unhappy endings each produce exactly one line, at a
    fitting level, with the instance's identity (and step, effect, key, worker) as fields.

    Method: for each expected line, the records of that instance whose message matches.
    """
    records = [json.loads(line) for line in scripted.lines]
    for key, level, pattern, fields in EXPECTED:
        instance = scripted.ids[key]
        found = [
            r for r in records if r.get("instance") == instance and re.search(pattern, r["message"])
        ]
        assert len(found) == 1, f"{key} {pattern}: {len(found)} lines\n{_about(records, instance)}"
        [line] = found
        assert line["level"] == level, line
        assert IDENTITY | fields <= line.keys(), line
    # Nothing else of the run was an error: the failures above are all there is.
    errors = [r for r in records if r["level"] == "ERROR"]
    assert len(errors) == sum(1 for _, level, _, _ in EXPECTED if level == "ERROR"), errors


def _about(records: list[dict[str, Any]], instance: str) -> str:
    return "\n".join(r["message"] for r in records if r.get("instance") == instance)
