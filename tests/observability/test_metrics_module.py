"""The metrics module on its own: one registry per engine, gauges that clear, a bounded read
rate for the journal's gauges, a clear error for a registry used twice."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from ledgerflow import Metrics
from ledgerflow.errors import ConfigurationError
from ledgerflow.ledger.records import ConsistencySignals


def _signals(
    parked: dict[str, int], unknown: int = 0, oldest: float | None = None
) -> ConsistencySignals:
    return ConsistencySignals(
        parked_by_reason=parked,
        flagged_by_reason={},
        unknown_open=unknown,
        unknown_oldest_at=oldest,
    )


def test_a_reason_whose_last_instance_left_reads_zero() -> None:
    """Goal: a parked reason that no instance has any more goes to 0 (an alert on it clears)
    rather than keeping its last value or vanishing."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.signals(_signals({"poison_step": 2}, unknown=1, oldest=100.0), now=160.0)
    value = registry.get_sample_value
    assert value("ledgerflow_parked_instances", {"reason": "poison_step"}) == 2
    assert value("ledgerflow_unknown_outcome_oldest_age_seconds") == 60
    metrics.signals(_signals({}), now=200.0)
    assert value("ledgerflow_parked_instances", {"reason": "poison_step"}) == 0
    assert value("ledgerflow_unknown_outcomes_open") == 0
    assert value("ledgerflow_unknown_outcome_oldest_age_seconds") == 0


def test_the_journal_gauges_are_read_at_a_bounded_rate() -> None:
    """Goal: once read, the gauges are not due again before their interval."""
    metrics = Metrics(CollectorRegistry(), signals_seconds=3600)
    assert metrics.signals_due()
    metrics.signals(_signals({}), now=0.0)
    assert not metrics.signals_due()
    assert Metrics(CollectorRegistry(), signals_seconds=0).signals_due()


def test_one_registry_holds_one_set_of_metrics() -> None:
    """Goal: two engines' metrics in one registry is a clear configuration error, not
    prometheus_client's duplicate-series message alone."""
    registry = CollectorRegistry()
    Metrics(registry)
    with pytest.raises(ConfigurationError, match="share one Metrics"):
        Metrics(registry)
