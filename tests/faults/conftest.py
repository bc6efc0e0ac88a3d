"""Real processes for the crash-point tests: a participant service and worker processes."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

HERE = Path(__file__).parent
WAIT_SECONDS_MAX = 30.0


def _read_line(stream: Any, timeout: float) -> str:
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        raise TimeoutError(f"no line within {timeout}s") from None


@dataclass
class Service:
    url: str
    folder: Path
    process: subprocess.Popen[str]

    def ledger(self, participant: str) -> dict[str, list[dict[str, Any]]]:
        response = httpx.get(f"{self.url}/{participant}/ledger", timeout=5)
        response.raise_for_status()
        data: dict[str, list[dict[str, Any]]] = response.json()
        return data

    def applied_count(self, participant: str, key: str) -> int:
        return sum(1 for row in self.ledger(participant)["applied"] if row["key"] == key)

    def received_count(self, participant: str, key: str) -> int:
        return sum(1 for row in self.ledger(participant)["received"] if row["key"] == key)

    def rules(self, rules: list[dict[str, Any]]) -> None:
        httpx.post(f"{self.url}/_control/rules", json=rules, timeout=5).raise_for_status()

    def held(self) -> int:
        count: int = httpx.get(f"{self.url}/_control/held", timeout=5).json()["held"]
        return count

    def release(self, then: str) -> None:
        httpx.post(f"{self.url}/_control/release", json={"then": then}, timeout=5)

    @staticmethod
    def wait_for(condition: Any, *, what: str, timeout: float = WAIT_SECONDS_MAX) -> None:
        """Poll a condition with a bound; never a blind sleep."""
        deadline = time.monotonic() + timeout
        pause = 0.01
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            time.sleep(pause)
            pause = min(pause * 2, 0.2)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    folder = tmp_path / "participants"
    folder.mkdir()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ledgerflow.demo.service",
            "--dir",
            str(folder),
            "--port",
            "0",
            "--participant",
            "inventory:lookup",
            "--participant",
            "payment:dedupe",
            "--participant",
            "legacy:none",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = _read_line(process.stdout, WAIT_SECONDS_MAX)
        assert line.startswith("LISTENING "), line
        yield Service(url=line.split()[1], folder=folder, process=process)
    finally:
        process.kill()
        process.wait(timeout=WAIT_SECONDS_MAX)
        if process.stdout is not None:
            process.stdout.close()


@dataclass
class Workers:
    db_url: str
    service: Service
    log: Path

    def spawn(
        self,
        *,
        faults: list[dict[str, Any]] | None = None,
        until_idle: bool = False,
    ) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
        env["LEDGERFLOW_TEST_SERVICE_URL"] = self.service.url
        env.pop("LEDGERFLOW_FAULTS", None)
        if faults:
            env["LEDGERFLOW_FAULTS"] = json.dumps(faults)
        command = [
            sys.executable,
            "-c",
            "from ledgerflow.cli.main import main; main()",
            "worker",
            "fault_workflows:registry",
            "--db",
            self.db_url,
            "--lease-seconds",
            "1",
            "--poll-seconds",
            "0.05",
        ]
        if until_idle:
            command.append("--until-idle")
        with self.log.open("ab") as log:
            return subprocess.Popen(command, env=env, stdout=log, stderr=log)

    def recover(self) -> None:
        """A fresh worker, run until nothing is runnable; it must exit cleanly in time."""
        process = self.spawn(until_idle=True)
        code = process.wait(timeout=WAIT_SECONDS_MAX)
        assert code == 0, self.log.read_text()[-3000:]


@pytest.fixture
def workers(tmp_path: Path, service: Service) -> Workers:
    return Workers(
        db_url=f"sqlite:///{tmp_path}/journal.db", service=service, log=tmp_path / "workers.log"
    )
