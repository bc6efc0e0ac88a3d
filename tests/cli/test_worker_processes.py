"""``ledgerflow worker --processes N`` as real processes: a supervisor and its worker children.

Each test runs the real command in a subprocess on a journal of each backend, with the
participants in their own service process; children are found by the pids the supervisor
logs and by the worker registry, killed for real with SIGKILL, and the participant's own
record (its ledger) says how often each effect was applied.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from supervised_workflows import PARTICIPANTS, registry

from conditions import eventually
from ledgerflow import InstanceStatus, SyncEngine
from processes import LEDGERFLOW, SERVICE_URL_VARIABLE, Service, child_environment, running_service

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

HERE = Path(__file__).parent
INSTANCES = 200
# Generous for a loaded 2-core machine: 200 workflows of two remote effects each.
RUN_SECONDS_MAX = 120.0
STOP_SECONDS_MAX = 30.0
STARTED = re.compile(r"worker process (\d+) of \d+ started, pid (\d+)")


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    with running_service(tmp_path / "participants", PARTICIPANTS) as s:
        yield s


def supervisor(
    db: str, service: Service, log: Path, *options: str, **env: str
) -> subprocess.Popen[bytes]:
    command = [*LEDGERFLOW, "worker", "supervised_workflows:registry", "--db", db]
    command += ["--lease-seconds", "2", "--poll-seconds", "0.05", *options]
    variables = {SERVICE_URL_VARIABLE: service.url, **env}
    with log.open("ab") as out:
        return subprocess.Popen(
            command, env=child_environment(HERE, **variables), stdout=out, stderr=out
        )


def children(log: Path) -> dict[int, list[int]]:
    """Slot -> the pids started in it, in order, from the supervisor's log."""
    found: dict[int, list[int]] = {}
    for slot, pid in STARTED.findall(log.read_text()):
        found.setdefault(int(slot), []).append(int(pid))
    return found


def gone(pid: int) -> bool:
    """No such process, or only its zombie (an orphan's, waiting for init to reap it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@contextmanager
def held_ports() -> Iterator[int]:
    """Two consecutive local ports held open by this process: the first is yielded."""
    for _ in range(100):
        with socket.socket() as first, socket.socket() as second:
            first.bind(("127.0.0.1", 0))
            port: int = first.getsockname()[1]
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            first.listen()
            second.listen()
            yield port
            return
    raise AssertionError("no two consecutive free ports")


def start_orders(engine: SyncEngine) -> None:
    for n in range(INSTANCES):
        engine.start("order", key=f"order-{n}", input=n)


def succeeded(engine: SyncEngine) -> int:
    return engine.store.count_by_status().get(InstanceStatus.SUCCEEDED, 0)


def applied_once_each(service: Service) -> None:
    """The participants' own record: every order's effect applied exactly once."""
    for participant in ("inventory", "payment"):
        rows = service.ledger(participant)["applied"]
        per_key = Counter(row["key"] for row in rows)
        assert len(per_key) == INSTANCES, participant
        assert set(per_key.values()) == {1}, participant


def stop(process: subprocess.Popen[bytes], log: Path) -> None:
    process.send_signal(signal.SIGTERM)
    code = process.wait(timeout=STOP_SECONDS_MAX)
    assert code == 0, log.read_text()[-3000:]


def test_two_processes_run_every_workflow_and_stop_on_sigterm(
    journal_url: str, service: Service, tmp_path: Path
) -> None:
    """Goal: two worker processes, each with its own identity, drive 200 workflows to the end
    with each effect applied once; SIGTERM to the supervisor stops both, leaving no process.

    Method: start 200 orders, run the supervisor, wait for all SUCCEEDED, read the live
    workers of the registry against the logged pids, SIGTERM the supervisor.
    """
    log = tmp_path / "supervisor.log"
    engine = SyncEngine(journal_url, registry)
    try:
        start_orders(engine)
        process = supervisor(journal_url, service, log, "--processes", "2")
        eventually(
            lambda: succeeded(engine) == INSTANCES,
            what=f"{INSTANCES} SUCCEEDED",
            timeout=RUN_SECONDS_MAX,
        )
        pids = {pids[0] for pids in children(log).values()}
        assert len(pids) == 2, log.read_text()[-3000:]
        live = engine.store.workers(live_since=time.time() - 30)
        assert {w.pid for w in live} == pids
        assert len({w.worker_id for w in live}) == 2
        applied_once_each(service)
        stop(process, log)
        assert all(gone(pid) for pid in pids)
        # Each child signed off from the registry as it stopped.
        assert engine.store.workers(live_since=time.time() - 30) == []
    finally:
        engine.close()


def test_a_killed_child_is_restarted_and_every_workflow_completes(
    journal_url: str, service: Service, tmp_path: Path
) -> None:
    """Goal: a child SIGKILLed mid-run is replaced; every workflow completes and each effect
    is applied once at the participant's own record.

    Method: 200 orders, two processes; once some have succeeded, SIGKILL the first child and
    wait for the supervisor to log a new process in its slot; then wait for all SUCCEEDED.
    """
    log = tmp_path / "supervisor.log"
    engine = SyncEngine(journal_url, registry)
    try:
        start_orders(engine)
        process = supervisor(journal_url, service, log, "--processes", "2")
        eventually(lambda: succeeded(engine) >= 20, what="some orders SUCCEEDED")
        assert succeeded(engine) < INSTANCES, "the run ended before the kill: nothing tested"
        victim = children(log)[1][0]
        os.kill(victim, signal.SIGKILL)
        replaced = eventually(
            lambda: len(children(log)[1]) == 2 and children(log)[1][1],
            what="a new process in the killed child's slot",
        )
        assert replaced != victim
        assert "killed by SIGKILL unexpectedly" in log.read_text()
        eventually(
            lambda: succeeded(engine) == INSTANCES,
            what=f"{INSTANCES} SUCCEEDED after the kill",
            timeout=RUN_SECONDS_MAX,
        )
        applied_once_each(service)
        stop(process, log)
        assert all(gone(pid) for pids in children(log).values() for pid in pids)
    finally:
        engine.close()


def test_children_of_a_killed_supervisor_stop_too(
    journal_url: str, service: Service, tmp_path: Path
) -> None:
    """Goal: a supervisor killed by SIGKILL (it can forward nothing) leaves no worker behind:
    the kernel tells each child its parent died, and it stops as on SIGTERM.

    Method: two processes on an idle journal, both live in the registry; SIGKILL the
    supervisor; both children must be gone, and signed off from the registry.
    """
    log = tmp_path / "supervisor.log"
    engine = SyncEngine(journal_url, registry)
    try:
        process = supervisor(journal_url, service, log, "--processes", "2")
        eventually(
            lambda: len(engine.store.workers(live_since=time.time() - 30)) == 2,
            what="two live workers",
            timeout=RUN_SECONDS_MAX,
        )
        pids = [pids[0] for pids in children(log).values()]
        process.kill()
        process.wait(timeout=STOP_SECONDS_MAX)
        eventually(lambda: all(gone(pid) for pid in pids), what="the children gone")
        assert engine.store.workers(live_since=time.time() - 30) == []
    finally:
        engine.close()


def test_children_that_keep_dying_at_start_end_the_supervisor_with_one_line(
    tmp_path: Path, service: Service
) -> None:
    """Goal: a child that cannot start (here: its metrics port is taken, which only the child
    finds out) is restarted with a doubling backoff, then the supervisor gives up: it stops
    the other child and exits non-zero with one error line of its own, no traceback.

    Method: hold a port, run two processes with --metrics-port on it (the first child gets
    that port, the second the next one).
    """
    log = tmp_path / "supervisor.log"
    db = f"sqlite:///{tmp_path}/journal.db"
    with held_ports() as port:
        process = supervisor(db, service, log, "--processes", "2", "--metrics-port", str(port))
        code = process.wait(timeout=RUN_SECONDS_MAX)
    text = log.read_text()
    assert code == 1, text
    assert "Traceback" not in text
    assert text.count(f"cannot serve metrics on 127.0.0.1:{port}") >= 3
    [error] = [line for line in text.splitlines() if "giving up" in line]
    assert re.fullmatch(
        r"error: \[LF100\] worker process [12] exited with code 1 within 30s of starting, 3 "
        r"times in a row: giving up \(its own output above says why\)",
        error,
    )
    assert "restarting it in 0.5s" in text  # the backoff, doubling
    assert "restarting it in 1.0s" in text
    assert all(gone(pid) for pids in children(log).values() for pid in pids)


def test_mistakes_every_child_would_make_are_one_error_before_any_child(
    tmp_path: Path, service: Service
) -> None:
    """Goal: a bad MODULE:OBJECT, a fault plan that is not one, or a store that cannot be
    opened is one line from the supervisor, and no child is started."""
    db = f"sqlite:///{tmp_path}/journal.db"
    cases = [
        (["no_such_module:registry", "--db", db], {}, "no_such_module"),
        (["supervised_workflows:registry", "--db", db], {"LEDGERFLOW_FAULTS": "[{"}, "fault plan"),
        (["supervised_workflows:registry", "--db", "nosuch://x"], {}, "nosuch"),
    ]
    for arguments, variables, said in cases:
        command = [*LEDGERFLOW, "worker", *arguments, "--processes", "3"]
        env = child_environment(HERE, **{SERVICE_URL_VARIABLE: service.url, **variables})
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=60, check=False, env=env
        )
        assert done.returncode != 0, said
        assert "Traceback" not in done.stderr, done.stderr
        [error] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert said in error
        assert "started, pid" not in done.stderr
