"""The record of a reconciliation run, as written and read back (internal).

A run says what it compared, what matched, what it corrected (with the audit record of each
correction), what it handed to a person (with the flag) and what it could not check. ``details``
holds one line per effect that did not simply match, so the record alone explains the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconciliationRun:
    # None for a dry run, which records nothing.
    run_id: int | None
    actor: str
    started_at: float
    finished_at: float | None
    compared: int = 0
    matched: int = 0
    corrected: int = 0
    escalated: int = 0
    unreachable: int = 0
    # One JSON object per difference or unanswered lookup: effect_id, instance_id, key,
    # participant, operation, ledger_state, participant_verdict, action, audit_id, flag, note.
    details: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    dry_run: bool = False
