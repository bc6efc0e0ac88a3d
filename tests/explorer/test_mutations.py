"""The explorer is not vacuous: with the engine broken on purpose, it finds the violation.

Each breakage (see ``breakages``: a store write, a dispatch or the compensation planner replaced
for the test's length; the shipped engine has no switch for any of them) breaks one guarantee.
For each, the exhaustive sweep at depth 1 and a handful of random seeds run on the demo order
workflow, and the violated invariant must be the one the breakage breaks. Compensating an effect
that was never confirmed is proven on a saga (test_sagas.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

import breakages
from ledgerflow.demo.order import registry, sample_order
from ledgerflow.testing import Explorer, scenario_for

pytestmark = [pytest.mark.slow, pytest.mark.simulated]


@pytest.fixture
def broken(request: pytest.FixtureRequest) -> Iterator[str]:
    with breakages.broken(request.param):
        yield request.param


@pytest.mark.parametrize(
    ("broken", "invariant"),
    [
        (breakages.INTENT_AFTER_DISPATCH, "no-duplicate-effect"),
        (breakages.FRESH_KEY_ON_REDISPATCH, "no-lost-completion"),
        (breakages.STALE_WRITES_ACCEPTED, "no-stale-write"),
    ],
    indirect=["broken"],
)
def test_explorer_finds_the_broken_guarantee(broken: str, invariant: str, tmp_path: Path) -> None:
    """Exhaustive depth 1 on one order, and 10 random seeds on 12 concurrent orders, each find
    the breakage's violation."""
    one = Explorer(scenario_for(registry, "order", [sample_order(1)]), folder=tmp_path)
    exhaustive = asyncio.run(one.exhaustive(depth=1))
    many = Explorer(
        scenario_for(registry, "order", [sample_order(n) for n in (1, 2, 3)], copies=4),
        folder=tmp_path,
    )
    seeded = asyncio.run(many.random(range(10)))
    for summary in (exhaustive, seeded):
        found = {v.invariant for run in summary.failures for v in run.violations}
        assert invariant in found, (broken, summary.mode, found)


def test_the_unbroken_engine_passes_the_same_runs(tmp_path: Path) -> None:
    """The same sweeps on the unbroken engine find nothing: the failures above are the
    breakages'."""
    one = Explorer(scenario_for(registry, "order", [sample_order(1)]), folder=tmp_path)
    assert asyncio.run(one.exhaustive(depth=1)).failures == []
    many = Explorer(
        scenario_for(registry, "order", [sample_order(n) for n in (1, 2, 3)], copies=4),
        folder=tmp_path,
    )
    assert asyncio.run(many.random(range(10))).failures == []
