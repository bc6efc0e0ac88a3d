"""Testing tools for Ledgerflow workflows (public front door).

- :class:`FakeClock`: time that moves when told to (or jumps to whoever sleeps).
- :class:`ScriptedParticipant` and :class:`World`: in-process participants that misbehave on
  cue (reject, time out, lose the reply after applying, apply late, drift) and keep their own
  record of every application.
- :class:`Explorer`: finds every path through a workflow's waits (what arrives at each, a
  timeout, a callback applied or not), crashes it at every fault point of each (exhaustive
  mode, with crashes during recovery), refuses each effect, or runs seeds (random mode), and
  checks the invariants after every run with the :mod:`oracle <ledgerflow.testing.oracle>`;
  each summary holds the coverage of what its runs reached.
- :func:`replay_history` and :func:`replay_histories`: exported histories replayed against the
  code as it is now, nothing dispatched; each gives a :class:`ReplayVerdict`.

Example::

    from ledgerflow.testing import Explorer, scenario_for

    explorer = Explorer(scenario_for(registry, "order", [{"items": [...]}]))
    summary = asyncio.run(explorer.exhaustive(depth=2))
    assert not summary.failures, summary.shortest_failure()
"""

from __future__ import annotations

from ledgerflow.runtime.faults import FaultPlan as FaultPlan
from ledgerflow.runtime.faults import FaultRule as FaultRule
from ledgerflow.runtime.faults import SimulatedCrash as SimulatedCrash
from ledgerflow.runtime.replay import ReplayVerdict as ReplayVerdict
from ledgerflow.testing.clock import FakeClock as FakeClock
from ledgerflow.testing.explorer import Explorer as Explorer
from ledgerflow.testing.explorer import SeedBank as SeedBank
from ledgerflow.testing.explorer import Summary as Summary
from ledgerflow.testing.oracle import Violation as Violation
from ledgerflow.testing.participants import Behavior as Behavior
from ledgerflow.testing.participants import ScriptedParticipant as ScriptedParticipant
from ledgerflow.testing.participants import World as World
from ledgerflow.testing.plans import Rates as Rates
from ledgerflow.testing.replay import replay_histories as replay_histories
from ledgerflow.testing.replay import replay_history as replay_history
from ledgerflow.testing.report import ConsistencyReport as ConsistencyReport
from ledgerflow.testing.report import build_report as build_report
from ledgerflow.testing.simulation import RunResult as RunResult
from ledgerflow.testing.simulation import Scenario as Scenario
from ledgerflow.testing.simulation import scenario_for as scenario_for
from ledgerflow.testing.start_sweep import StartSpec as StartSpec

__all__ = [
    "Behavior",
    "ConsistencyReport",
    "Explorer",
    "FakeClock",
    "FaultPlan",
    "FaultRule",
    "Rates",
    "ReplayVerdict",
    "RunResult",
    "Scenario",
    "ScriptedParticipant",
    "SeedBank",
    "SimulatedCrash",
    "StartSpec",
    "Summary",
    "Violation",
    "World",
    "build_report",
    "replay_histories",
    "replay_history",
    "scenario_for",
]
