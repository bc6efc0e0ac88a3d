"""Real processes for the web and waiting tests: ``ledgerflow serve`` and worker processes.

These tests need no participant service (unlike ``tests/processes.py``): the workflows only
wait. Every process a test starts is stopped at teardown even when the test failed, and every
wait is bounded and polls a condition, never sleeps blindly.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conditions import WAIT_SECONDS_MAX, eventually
from processes import LEDGERFLOW, child_environment, first_line

HERE = Path(__file__).parent


@dataclass
class Processes:
    """Worker and server processes over one SQLite journal, all stopped at teardown."""

    folder: Path
    db_url: str
    markers: Path
    started: list[subprocess.Popen[Any]] = field(default_factory=list)

    @property
    def log(self) -> Path:
        return self.folder / "processes.log"

    def _env(self, faults: list[dict[str, Any]] | None) -> dict[str, str]:
        env = child_environment(HERE, LEDGERFLOW_TEST_MARKERS=str(self.markers))
        env.pop("LEDGERFLOW_FAULTS", None)
        if faults:
            env["LEDGERFLOW_FAULTS"] = json.dumps(faults)
        return env

    def worker(
        self,
        *,
        faults: list[dict[str, Any]] | None = None,
        until_idle: bool = False,
        lease_seconds: float = 10.0,
    ) -> subprocess.Popen[bytes]:
        command = [
            *LEDGERFLOW,
            *("worker", "wait_workflows:registry", "--db", self.db_url),
            *("--lease-seconds", str(lease_seconds), "--poll-seconds", "0.05"),
        ]
        if until_idle:
            command.append("--until-idle")
        with self.log.open("ab") as log:
            process = subprocess.Popen(command, env=self._env(faults), stdout=log, stderr=log)
        self.started.append(process)
        return process

    def server(
        self,
        *extra: str,
        db_url: str | None = None,
        faults: list[dict[str, Any]] | None = None,
        descriptors_max: int | None = None,
    ) -> tuple[str, subprocess.Popen[str]]:
        """Start ``ledgerflow serve --port 0`` (with ``extra`` options, on ``db_url`` or this
        world's journal, with the fault plan ``faults``, and at most ``descriptors_max`` open
        files if given); return its URL (once it accepts connections) and the process."""
        # The serve command object directly: it works whether or not the entry point's group
        # has registered it yet.
        command = [
            *(sys.executable, "-c", "from ledgerflow.cli.serve import serve; serve()"),
            *("--db", db_url or self.db_url, "--port", "0", *extra),
        ]
        with self.log.open("ab") as log:
            process = subprocess.Popen(
                command,
                env=self._env(faults),
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                preexec_fn=None if descriptors_max is None else _descriptors(descriptors_max),
            )
        self.started.append(process)
        line = first_line(process)
        assert line.startswith("LISTENING http://"), f"{line!r}\n{self.tail()}"
        return line.split()[1], process

    def stop(self, process: subprocess.Popen[Any]) -> int:
        """SIGTERM, then a bounded wait for a graceful exit."""
        process.send_signal(signal.SIGTERM)
        return process.wait(timeout=WAIT_SECONDS_MAX)

    def kill(self, process: subprocess.Popen[Any]) -> int:
        process.kill()
        return process.wait(timeout=WAIT_SECONDS_MAX)

    wait_until = staticmethod(eventually)

    def marked(self, point: str, key: str) -> bool:
        return (self.markers / f"{point}-{key}").exists()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def close(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=WAIT_SECONDS_MAX)
            if process.stdout is not None:
                process.stdout.close()


def _descriptors(count: int) -> Callable[[], None]:
    def limit() -> None:  # in the child, before it runs: RLIMIT_NOFILE, soft and hard
        resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))

    return limit


@contextmanager
def _processes_in(folder: Path) -> Iterator[Processes]:
    markers = folder / "markers"
    markers.mkdir()
    procs = Processes(folder=folder, db_url=f"sqlite:///{folder}/journal.db", markers=markers)
    try:
        yield procs
    finally:
        procs.close()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    with _processes_in(tmp_path) as procs:
        yield procs


@pytest.fixture(scope="module")
def module_processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Processes]:
    """Like ``processes``, shared by a module's tests (servers started once for all)."""
    with _processes_in(tmp_path_factory.mktemp("processes")) as procs:
        yield procs
