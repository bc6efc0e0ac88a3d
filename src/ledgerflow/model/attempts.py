"""The errors of failed attempts, kept with the step or effect they belong to (pure).

A retried step or effect keeps every attempt's error, not only the last: the first failure is
often the cause and the later ones its echo. The list is bounded: the first error and the most
recent ones are kept, with a count of those dropped between them.
"""

from __future__ import annotations

import json
from typing import Any

from ledgerflow import limits


def with_attempt_error(
    recorded: str | None, *, attempt: int, error: dict[str, Any], at: float
) -> str:
    """``recorded`` (a JSON array, or None) with one more entry, as JSON text."""
    entries: list[dict[str, Any]] = json.loads(recorded) if recorded else []
    entries.append({"attempt": attempt, "at": at, **error})
    kept = limits.ATTEMPT_ERRORS_KEPT_MAX
    if len(entries) > kept:
        first, rest = entries[0], entries[-(kept - 1) :]
        dropped = len(entries) - kept + int(first.get("dropped_after", 0))
        entries = [{**first, "dropped_after": dropped}, *rest]
    return json.dumps(entries, sort_keys=True, separators=(",", ":"))


def attempt_errors(recorded: str | None) -> list[dict[str, Any]]:
    """The kept entries, oldest first (an entry may say how many were dropped after it)."""
    if not recorded:
        return []
    decoded = json.loads(recorded)
    return [e for e in decoded if isinstance(e, dict)] if isinstance(decoded, list) else []
