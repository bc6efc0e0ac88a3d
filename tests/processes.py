"""Real processes for the tests that kill workers: a participant service and worker processes.

Participants run in their own process (``python -m ledgerflow.demo.service``), each keeping its
own SQLite ledger of every application by idempotency key; workers are ``ledgerflow worker``
processes, spawned with a fault plan in their environment and killed for real. Test folders
bind these to their own cast of participants and their own workflow module in their conftest.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

WAIT_SECONDS_MAX = 30.0
# This folder: the tests' shared modules (``remote_cast``...), importable by the processes too.
TESTS = Path(__file__).resolve().parent
# The ``ledgerflow`` command, run by this interpreter (as ``python -m`` would, from the tree).
LEDGERFLOW = [sys.executable, "-c", "from ledgerflow.cli.main import main; main()"]
SERVICE_URL_VARIABLE = "LEDGERFLOW_TEST_SERVICE_URL"


def child_environment(folder: Path, **variables: str) -> dict[str, str]:
    """The environment of a process a test starts: this one's, with ``folder`` (where its
    workflow module is) and the tests' shared modules importable, plus ``variables``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(folder), str(TESTS), env.get("PYTHONPATH", "")])
    env.update(variables)
    return env


@dataclass
class Service:
    url: str
    folder: Path

    def _post(self, path: str, body: Any) -> Any:
        response = httpx.post(f"{self.url}{path}", json=body, timeout=WAIT_SECONDS_MAX)
        response.raise_for_status()
        return response.json()

    def ledger(self, participant: str) -> dict[str, list[dict[str, Any]]]:
        response = httpx.get(f"{self.url}/{participant}/ledger", timeout=WAIT_SECONDS_MAX)
        response.raise_for_status()
        data: dict[str, list[dict[str, Any]]] = response.json()
        return data

    def applied(self, participant: str, key: str) -> list[dict[str, Any]]:
        return [row for row in self.ledger(participant)["applied"] if row["key"] == key]

    def received(self, participant: str, key: str) -> list[dict[str, Any]]:
        return [row for row in self.ledger(participant)["received"] if row["key"] == key]

    def applied_count(self, participant: str, key: str) -> int:
        return len(self.applied(participant, key))

    def received_count(self, participant: str, key: str) -> int:
        return len(self.received(participant, key))

    def rules(self, *rules: dict[str, Any]) -> None:
        self._post("/_control/rules", list(rules))

    def reverse(self, participant: str, key: str, *, by: str) -> None:
        """Someone outside the workflow undoes an applied effect (participant drift)."""
        self._post("/_control/reverse", {"participant": participant, "key": key, "by": by})

    def wait_held(self, count: int) -> None:
        """Long-poll (bounded by the service) until ``count`` requests are held."""
        response = httpx.get(
            f"{self.url}/_control/held",
            params={"at_least": count, "timeout": WAIT_SECONDS_MAX},
            timeout=WAIT_SECONDS_MAX + 5,
        )
        assert response.json()["held"] >= count, "the participant never held the request"

    def release(self, then: str) -> None:
        assert self._post("/_control/release", {"then": then})["released"] >= 1


def first_line(process: subprocess.Popen[str]) -> str:
    """The process's first line of output, waited for at most ``WAIT_SECONDS_MAX``."""
    # readline() blocks; a helper thread turns it into a bounded wait.
    lines: queue.Queue[str] = queue.Queue()
    stdout = process.stdout
    assert stdout is not None
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    try:
        return lines.get(timeout=WAIT_SECONDS_MAX)
    except queue.Empty:
        return ""


class ServiceProcess:
    """The participant service (``python -m ledgerflow.demo.service``) hosting ``participants``
    (specs such as ``inventory:lookup``, see ``remote_cast``), which a test may stop and start
    again on the same port and folder: its ledgers survive, as a real service's database would.
    """

    def __init__(
        self, folder: Path, participants: Sequence[str], options: Sequence[str] = ()
    ) -> None:
        self.folder = folder
        self.participants = tuple(participants)
        # The service's other options (``--lose-keys``), changeable between restarts.
        self.options = tuple(options)
        self.port = 0
        self.process: subprocess.Popen[str] | None = None
        self.service: Service | None = None

    def start(self) -> Service:
        command = [sys.executable, "-m", "ledgerflow.demo.service", "--dir", str(self.folder)]
        for spec in self.participants:
            command += ["--participant", spec]
        command += ["--port", str(self.port), *self.options]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        line = first_line(self.process)
        assert line.startswith("LISTENING "), line
        url = line.split()[1]
        self.port = int(url.rsplit(":", 1)[1])
        self.service = Service(url=url, folder=self.folder)
        return self.service

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=WAIT_SECONDS_MAX)
            if self.process.stdout is not None:
                self.process.stdout.close()
            self.process = None


@contextmanager
def running_service(folder: Path, participants: Sequence[str]) -> Iterator[Service]:
    """The participant service for the length of the block (it makes ``folder`` if need be)."""
    process = ServiceProcess(folder, participants)
    try:
        yield process.start()
    finally:
        process.stop()


def worker_process(
    target: str,
    db_url: str,
    *,
    path: Path,
    log: Path,
    options: Sequence[str],
    faults: list[dict[str, Any]] | None = None,
    **variables: str,
) -> subprocess.Popen[bytes]:
    """A ``ledgerflow worker`` process for ``target`` (``module:registry``, importable from
    ``path``) on ``db_url``, logging to ``log``; with ``faults``, the plan it runs under (none
    inherited from the test's own environment)."""
    env = child_environment(path, **variables)
    env.pop("LEDGERFLOW_FAULTS", None)
    if faults:
        env["LEDGERFLOW_FAULTS"] = json.dumps(faults)
    command = [*LEDGERFLOW, "worker", target, "--db", db_url, *options]
    with log.open("ab") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=out)


def killed_script(script: Path, *args: str, rules: list[dict[str, Any]]) -> None:
    """Run a test's own process (``python SCRIPT ARGS``, its output dropped) under the fault
    plan ``rules``: it must die by SIGKILL at one of their points, within the bound."""
    env = dict(os.environ)
    env["LEDGERFLOW_FAULTS"] = json.dumps(rules)
    process = subprocess.run(
        [sys.executable, str(script), *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=WAIT_SECONDS_MAX * 2,
        check=False,
    )
    assert process.returncode == -signal.SIGKILL, "the process was to die by SIGKILL at the point"


@dataclass
class Workers:
    """Worker processes for ``target`` (``module:registry``), importable from ``path``."""

    db_url: str
    service: Service
    log: Path
    target: str
    path: Path
    # Short, so a killed worker's instances come back fast; a test of many processes on a
    # loaded machine gives a longer one (a 1 s lease can lapse under a live, starved worker).
    lease_seconds: float = 1.0

    @classmethod
    def in_folder(cls, folder: Path, service: Service, *, target: str, path: Path) -> Workers:
        """Workers on a SQLite journal in ``folder`` (the test's own), logging beside it."""
        return cls(
            db_url=f"sqlite:///{folder}/journal.db",
            service=service,
            log=folder / "workers.log",
            target=target,
            path=path,
        )

    def spawn(
        self, *, faults: list[dict[str, Any]] | None = None, until_idle: bool = False
    ) -> subprocess.Popen[bytes]:
        options = ["--lease-seconds", f"{self.lease_seconds:g}", "--poll-seconds", "0.05"]
        if until_idle:
            options.append("--until-idle")
        return worker_process(
            self.target,
            self.db_url,
            path=self.path,
            log=self.log,
            options=options,
            faults=faults,
            **{SERVICE_URL_VARIABLE: self.service.url},
        )

    def finish(self, process: subprocess.Popen[bytes]) -> None:
        """Wait (bounded) for an ``--until-idle`` worker; it must exit cleanly."""
        code = process.wait(timeout=WAIT_SECONDS_MAX)
        assert code == 0, self.log.read_text()[-3000:]

    def recover(self) -> None:
        """A fresh worker, run until nothing is runnable."""
        self.finish(self.spawn(until_idle=True))

    def killed_at(self, faults: list[dict[str, Any]]) -> None:
        """A worker that must die by SIGKILL at one of the named fault points."""
        code = self.spawn(faults=faults).wait(timeout=WAIT_SECONDS_MAX)
        assert code == -signal.SIGKILL, f"worker exited {code}\n{self.log.read_text()[-3000:]}"
