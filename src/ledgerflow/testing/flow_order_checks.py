"""The oracle's checks of the order of flow-control admissions: priority and weighted fairness
between keys (internal; run by :func:`ledgerflow.testing.flow_checks.flows_held`).

- ``flow-priority-inverted``: an attempt admitted while a higher-priority waiter of the same
  flow key had been waiting longer than one grant interval (``1 / rate_per_second``, or the
  concurrency poll) and was admitted only later, or never. An admission that passed over
  waiters whose workers had gone silent (``passed_over``) is allowed that.
- ``flow-unfair``: over a run of admissions during which two fairness keys of one flow key and
  priority both had waiters, ``|W_a / w_a - W_b / w_b|`` exceeded the documented bound
  (:func:`ledgerflow.model.flow_order.fairness_bound`), plus one for each admission in the run
  that passed over a silent waiter.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence

from ledgerflow import limits
from ledgerflow.model.flow import Admission
from ledgerflow.model.flow_order import fairness_bound
from ledgerflow.testing.violations import Violation

PRIORITY_INVERTED = "flow-priority-inverted"
UNFAIR = "flow-unfair"


def _grant_interval(a: Admission) -> float:
    if a.rate_per_second:
        return 1.0 / a.rate_per_second
    return limits.FLOW_CONCURRENCY_POLL_SECONDS


def order_held(admissions: Sequence[Admission]) -> list[Violation]:
    keys: dict[tuple[str, str], list[Admission]] = defaultdict(list)
    for a in admissions:
        keys[(a.scope, a.flow_key)].append(a)
    found: list[Violation] = []
    for (scope, key), rows in keys.items():
        found.extend(_inversions(scope, key, rows))
        by_priority: dict[int, list[Admission]] = defaultdict(list)
        for a in rows:
            by_priority[a.priority].append(a)
        for priority, same in by_priority.items():
            found.extend(_unfair(scope, key, priority, same))
    return found


def _inversions(scope: str, key: str, rows: list[Admission]) -> list[Violation]:
    waiters = [a for a in rows if a.throttled_since is not None]
    found: list[Violation] = []
    for a in rows:
        if a.admitted_at is None or a.passed_over:
            continue
        t = a.admitted_at
        for b in waiters:
            assert b.throttled_since is not None
            if (
                b.priority > a.priority
                and b.throttled_since <= t - _grant_interval(a)
                and (b.admitted_at is None or b.admitted_at > t)
            ):
                found.append(
                    Violation(
                        PRIORITY_INVERTED,
                        a.instance_id,
                        f"{scope} key {key}: effect {a.effect_id} (priority {a.priority}) "
                        f"admitted at {t:.3f} while effect {b.effect_id} (priority "
                        f"{b.priority}) waited since {b.throttled_since:.3f}",
                    )
                )
                break
    return found


def _unfair(scope: str, key: str, priority: int, rows: list[Admission]) -> list[Violation]:
    fair_keys = sorted({a.fairness_key for a in rows})
    weights = {a.fairness_key: a.weight for a in rows}
    admitted = sorted((a for a in rows if a.admitted_at is not None), key=_admitted_at)
    found: list[Violation] = []
    for one, other in itertools.combinations(fair_keys, 2):
        pair = [a for a in admitted if a.fairness_key in (one, other)]
        waiting = [a for a in rows if a.fairness_key in (one, other)]
        spread, run_start, passed = 0.0, None, 0
        low = high = level = 0.0
        for a in pair:
            t = _admitted_at(a)
            if not (_backlogged(waiting, one, t) and _backlogged(waiting, other, t)):
                low = high = level = 0.0
                run_start, passed = None, 0
                continue
            run_start = t if run_start is None else run_start
            passed += a.passed_over
            level += 1 / weights[one] if a.fairness_key == one else -1 / weights[other]
            low, high = min(low, level), max(high, level)
            spread = high - low
            if spread > fairness_bound(weights[one], weights[other]) + passed + 1e-9:
                found.append(
                    Violation(
                        UNFAIR,
                        None,
                        f"{scope} key {key} priority {priority}: {one!r} and {other!r} both "
                        f"waiting from {run_start:.3f} to {t:.3f}, admissions per weight "
                        f"apart by {spread:.2f}",
                    )
                )
                break
    return found


def _admitted_at(a: Admission) -> float:
    return a.admitted_at if a.admitted_at is not None else float("inf")


def _backlogged(rows: list[Admission], fairness_key: str, t: float) -> bool:
    """Whether the fairness key had a waiter at ``t`` (one admitted at ``t`` counts)."""
    return any(
        a.fairness_key == fairness_key
        and a.throttled_since is not None
        and a.throttled_since < t
        and (a.admitted_at is None or a.admitted_at >= t)
        for a in rows
    )
