"""The oracle's checks of flow control on effects (internal: the oracle's ``check`` runs them
on its snapshot, and tests call :func:`flow_violations` on a store; a module of its own so that
the oracle's stays within its length bound).

What the admissions kept must say: each flow key's admissions, by the database's clock, never
exceed ``burst + rate * window`` in any window, to the clock's resolution (the GCRA held
across every worker), and an attempt still THROTTLED was never admitted, while an admitted one
was admitted no earlier than it began to wait (its timeout's clock starts at admission); and
the order of admissions respected priority and weighted fairness
(:mod:`ledgerflow.testing.flow_order_checks`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ledgerflow.model.flow import Admission, AdmissionState, admissions_over_rate
from ledgerflow.storage.store import Store
from ledgerflow.testing.flow_order_checks import order_held
from ledgerflow.testing.violations import Violation

RATE_EXCEEDED = "flow-rate-exceeded"
THROTTLED_SENT = "flow-throttled-admitted"
ADMITTED_BEFORE_WAIT = "flow-admitted-before-wait"


def flow_violations(store: Store) -> list[Violation]:
    """Every flow-control invariant the store's admissions break, read in one listing."""
    return flows_held(store.flow_admissions())


def flows_held(admissions: Sequence[Admission]) -> list[Violation]:
    found: list[Violation] = []
    keys: dict[tuple[str, str, float, int], list[float]] = defaultdict(list)
    for a in admissions:
        where = f"{a.scope} key {a.flow_key}: effect {a.effect_id} attempt {a.attempt}"
        if a.state is AdmissionState.THROTTLED and a.admitted_at is not None:
            found.append(
                Violation(THROTTLED_SENT, a.instance_id, f"{where} is THROTTLED yet admitted")
            )
        if a.state is not AdmissionState.THROTTLED:
            if a.admitted_at is None or (
                a.throttled_since is not None and a.admitted_at < a.throttled_since
            ):
                found.append(
                    Violation(
                        ADMITTED_BEFORE_WAIT,
                        a.instance_id,
                        f"{where} admitted at {a.admitted_at}, throttled since {a.throttled_since}",
                    )
                )
            elif a.rate_per_second is not None:
                keys[(a.scope, a.flow_key, a.rate_per_second, a.burst or 1)].append(a.admitted_at)
    for (scope, key, rate, burst), times in keys.items():
        over = admissions_over_rate(times, rate_per_second=rate, burst=burst)
        if over is not None:
            count, start, end = over
            found.append(
                Violation(
                    RATE_EXCEEDED,
                    None,
                    f"{scope} key {key}: {count} admissions in {end - start:.3f}s, over "
                    f"{burst} + {rate}/s",
                )
            )
    return found + order_held(admissions)
