"""The observability tests' scripted run, shared by the metrics and the log tests
(``conftest.scripted`` runs it once per module).

Real processes throughout: a participant service; worker 1, SIGKILLed right after the
inventory applied a reservation (its answer dies with it); then worker 2, with metrics on and
JSON logs (``LEDGERFLOW_LOG_FORMAT=json``), which takes the reservation over and settles it
by the lookup, parks a legacy effect whose outcome only a person can settle, compensates a
charge after a failing step, retries a step that fails once, and fails an instance whose
posting the participant refuses for good. The run ends with worker 2's ``/metrics`` scraped
and every line it logged.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from observed_workflows import PARTICIPANTS, registry
from scrape import Samples, StderrLines, scrape, value

from conditions import eventually
from ledgerflow import InstanceStatus, SyncEngine
from processes import LEDGERFLOW, SERVICE_URL_VARIABLE, Workers, child_environment, running_service

HERE = Path(__file__).parent
# How the worker announces its metrics port (in either log format).
METRICS_URL = r"http://[0-9.]+:[0-9]+/metrics"

# Business key -> (workflow, input, how it must end).
SCRIPT: dict[str, tuple[str, Any, InstanceStatus]] = {
    "r-1": ("reserve", {"sku": "A-1"}, InstanceStatus.SUCCEEDED),
    "l-1": ("legacy", {"what": "x"}, InstanceStatus.MANUAL_INTERVENTION),
    "c-1": ("refunded", {"amount": 5, "sku": "B-2"}, InstanceStatus.COMPENSATED),
    "f-1": ("flaky", 41, InstanceStatus.SUCCEEDED),
    "p-1": ("posted", {"entry": 7}, InstanceStatus.FAILED),
}


@dataclass
class ScriptedRun:
    samples: Samples
    # The exposition as scraped (for a person reading a failure).
    text: str
    lines: list[str]
    # Business key -> instance id.
    ids: dict[str, str]
    worker_log: Path


def scripted_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScriptedRun]:
    folder = tmp_path_factory.mktemp("scripted")
    with running_service(folder / "participants", PARTICIPANTS) as service:
        workers = Workers.in_folder(
            folder, service, target="observed_workflows:registry", path=HERE
        )
        with SyncEngine(workers.db_url, registry) as engine:
            ids = {"r-1": engine.start("reserve", key="r-1", input=SCRIPT["r-1"][1]).instance_id}
            workers.killed_at(
                [{"point": "effect.after_dispatch", "action": "kill", "match": {"seq": 1}}]
            )
            service.rules(
                {"participant": "legacy", "operation": "apply", "action": "fail"},
                {"participant": "books", "operation": "post", "action": "reject_final"},
            )
            for key, (workflow, data, _) in SCRIPT.items():
                ids[key] = engine.start(workflow, key=key, input=data).instance_id
            env = child_environment(HERE, **{SERVICE_URL_VARIABLE: service.url})
            env["LEDGERFLOW_LOG_FORMAT"] = "json"
            command = [
                *LEDGERFLOW,
                *("worker", workers.target, "--db", workers.db_url),
                *("--lease-seconds", "1", "--poll-seconds", "0.05"),
                *("--metrics-port", "0", "--metrics-signals-seconds", "0.1"),
            ]
            process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
            try:
                lines = StderrLines(process)
                url = lines.wait_for(METRICS_URL)
                for key, (_, _, status) in SCRIPT.items():
                    eventually(
                        lambda k=key, s=status: engine.get(ids[k]).status is s,
                        what=f"{key} to end {status.value}",
                    )
                samples = eventually(
                    lambda: _with_gauges(scrape(url)), what="the gauges read after the park"
                )
                text = httpx.get(url, timeout=30).text
            finally:
                process.terminate()
                process.wait(timeout=30)
                if process.stderr is not None:
                    process.stderr.close()
        yield ScriptedRun(
            samples=samples, text=text, lines=lines.all(), ids=ids, worker_log=workers.log
        )


def _with_gauges(samples: Samples) -> Samples | None:
    """The scrape, once the gauges were read after the run ended: the park, and only the
    parked effect still in doubt (read while the reservation was still UNKNOWN, it says 2)."""
    parked = value(samples, "ledgerflow_parked_instances", reason="effect_outcome_unknown")
    unknown = value(samples, "ledgerflow_unknown_outcomes_open")
    return samples if (parked, unknown) == (1, 1) else None
