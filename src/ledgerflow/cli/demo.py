"""``ledgerflow demo``: orders across four participant services, with workers killed mid-flight.

This module owns the end-to-end demonstration, built from real processes only: a participant
service (each participant keeps its own ledger in its own SQLite file), a SQLite journal, and
worker processes that SIGKILL themselves at named gaps of the effect protocol through
``LEDGERFLOW_FAULTS``. Nothing is simulated in this process: it starts orders, starts and waits
for processes, and then reads two independent sources of truth, the engine's ledgers and the
participants' own ledgers, to check that no effect was applied twice.

Every wait is bounded, and each is a wait on something (a line, a process exit), not a sleep.

:mod:`ledgerflow.demo.order` is imported inside the functions that need it: the ``ledgerflow``
entry point imports this module for every command, and the demo's participants (HTTP clients,
a URL read from the environment at import) have no business in ``ledgerflow list``.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import click
import httpx
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ledgerflow import (
    EffectRecord,
    EffectState,
    InstanceRecord,
    InstanceStatus,
    Registry,
    SyncEngine,
)
from ledgerflow.cli.logs import LOG_FORMAT_VARIABLE, configure_logging, log_format_option
from ledgerflow.cli.render import cell, console, inert, print_table, status_cell
from ledgerflow.cli.tables import steps_cell
from ledgerflow.extras import require_extra
from ledgerflow.model.instance import TERMINAL_STATUSES
from ledgerflow.runtime import faults

ORDERS_DEFAULT = 5
ORDERS_MAX = 100
# Bounds on every wait. A worker generation's bound covers process start-up, lease expiry of
# the instances a killed worker held, and the orders themselves.
SERVICE_START_SECONDS_MAX = 20.0
WORKER_SECONDS_MAX = 60.0
SERVICE_STOP_SECONDS_MAX = 5.0
HTTP_TIMEOUT_SECONDS = 5.0
# Short leases make a killed worker's instances claimable again within a second; that is the
# whole cost of a crash in this demo.
LEASE_SECONDS = 1.0
POLL_SECONDS = 0.05
REGISTRY_TARGET = "ledgerflow.demo.order:registry"
# `python -m ledgerflow.cli.main` would need a __main__ guard in main.py; this needs nothing.
_CLI = [sys.executable, "-c", "from ledgerflow.cli.main import main; main()"]


@dataclass(frozen=True, slots=True)
class Crash:
    """A worker generation that kills itself at one fault point of one order's effect."""

    order: int
    point: str
    effect: str
    meaning: str
    recovery: str

    @property
    def key(self) -> str:
        return f"order-{self.order}"

    def rules(self) -> list[dict[str, Any]]:
        return [
            {
                "point": self.point,
                "action": "kill",
                "match": {"instance": self.key, "operation": self.effect},
            }
        ]


CRASHES = (
    Crash(
        order=2,
        point="effect.after_dispatch",
        effect="payment.charge",
        meaning="applied at the participant, not yet in the ledger",
        recovery=(
            "payment deduplicates but has no lookup: the next worker marks the effect UNKNOWN "
            "and re-dispatches it under the same idempotency key; the participant answers the "
            "duplicate with its first receipt instead of charging again"
        ),
    ),
    Crash(
        order=3,
        point="effect.before_dispatch",
        effect="shipping.ship",
        meaning="the intent is durable in the ledger, the request was never sent",
        recovery=(
            "the next worker cannot know whether the request left, so the effect becomes "
            "UNKNOWN; shipping has a lookup, which answers not applied and fences attempt 1, "
            "then the effect is re-dispatched under the same key as attempt 2"
        ),
    ),
)


class DemoFailed(click.ClickException):
    """The demo could not run, or its verification found a violation (exit 1)."""


def _read_line(stream: IO[str], timeout: float) -> str | None:
    """One line from a pipe, or None if none came in time (readline itself cannot time out)."""
    lines: queue.Queue[str] = queue.Queue(maxsize=1)
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        return None


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError:
        return ""


class Demo:
    """One run of the demo in one folder: the processes it started and what it printed."""

    def __init__(
        self, folder: Path, orders: int, out: Console, *, log_format: str = "text"
    ) -> None:
        self.folder = folder
        # How its worker processes log (to worker.log).
        self.log_format = log_format
        self.orders = orders
        self.out = out
        self.db_url = f"sqlite:///{folder / 'ledgerflow.db'}"
        self.worker_log = folder / "worker.log"
        self.service_log = folder / "service.log"
        self.url = ""
        self.generation = 0
        self.keys_by_id: dict[str, str] = {}

    # -- processes -------------------------------------------------------------------------

    @contextmanager
    def service(self) -> Iterator[str]:
        """The participant service, stopped whatever happens inside."""
        from ledgerflow.demo.order import SERVICE_PARTICIPANTS

        command = [
            sys.executable,
            "-m",
            "ledgerflow.demo.service",
            "--dir",
            str(self.folder),
            "--port",
            "0",
        ]
        for spec in SERVICE_PARTICIPANTS:
            command += ["--participant", spec]
        with self.service_log.open("ab") as log:
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True
            )
        try:
            assert process.stdout is not None
            line = _read_line(process.stdout, SERVICE_START_SECONDS_MAX)
            if not line or not line.startswith("LISTENING "):
                raise DemoFailed(
                    f"the participant service did not report LISTENING within "
                    f"{SERVICE_START_SECONDS_MAX:.0f}s (got {line!r}); log {self.service_log}:\n"
                    + _tail(self.service_log)
                )
            self.url = line.split()[1]
            yield self.url
        finally:
            # SIGTERM lets uvicorn close the participants' ledgers; SIGKILL only if it hangs.
            process.terminate()
            try:
                process.wait(timeout=SERVICE_STOP_SECONDS_MAX)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=SERVICE_STOP_SECONDS_MAX)
            if process.stdout is not None:
                process.stdout.close()

    def run_worker(self, crash: Crash | None) -> tuple[int, int]:
        """Run one worker generation until it dies or is idle; return its pid and exit code."""
        from ledgerflow.demo.order import SERVICE_URL_ENVIRONMENT_VARIABLE

        self.generation += 1
        env = dict(os.environ)
        env[SERVICE_URL_ENVIRONMENT_VARIABLE] = self.url
        env[LOG_FORMAT_VARIABLE] = self.log_format
        env.pop(faults.ENVIRONMENT_VARIABLE, None)
        if crash is not None:
            env[faults.ENVIRONMENT_VARIABLE] = json.dumps(crash.rules())
        # --until-idle on every generation: should a fault not fire, the worker still ends.
        command = [
            *_CLI,
            "worker",
            REGISTRY_TARGET,
            "--db",
            self.db_url,
            "--lease-seconds",
            str(LEASE_SECONDS),
            "--poll-seconds",
            str(POLL_SECONDS),
            "--concurrency",
            "1",
            "--until-idle",
        ]
        with self.worker_log.open("ab") as log:
            banner = f"\n=== worker generation {self.generation}"
            banner += f", faults {crash.rules()} ===\n" if crash else ", no faults ===\n"
            log.write(banner.encode())
            log.flush()
            process = subprocess.Popen(
                command, env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL
            )
        try:
            code = process.wait(timeout=WORKER_SECONDS_MAX)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=SERVICE_STOP_SECONDS_MAX)
            raise DemoFailed(
                f"worker generation {self.generation} did not finish within "
                f"{WORKER_SECONDS_MAX:.0f}s; log {self.worker_log}:\n" + _tail(self.worker_log)
            ) from None
        return process.pid, code

    # -- reading both sides ----------------------------------------------------------------

    def participant_ledger(self, name: str) -> dict[str, list[dict[str, Any]]]:
        response = httpx.get(f"{self.url}/{name}/ledger", timeout=HTTP_TIMEOUT_SECONDS)
        response.raise_for_status()
        ledger: dict[str, list[dict[str, Any]]] = response.json()
        return ledger

    def count_at_participant(self, effect: EffectRecord) -> tuple[int, int]:
        """How often the participant received and applied this effect's key."""
        ledger = self.participant_ledger(effect.participant)
        received = sum(1 for row in ledger["received"] if row["key"] == effect.idempotency_key)
        applied = sum(1 for row in ledger["applied"] if row["key"] == effect.idempotency_key)
        return received, applied

    def effect_of(self, engine: SyncEngine, crash: Crash) -> tuple[InstanceRecord, EffectRecord]:
        (record,) = [r for r in engine.list(limit=ORDERS_MAX) if r.business_key == crash.key]
        for effect in engine.detail(record.instance_id).effects:
            if f"{effect.participant}.{effect.operation}" == crash.effect:
                return record, effect
        raise DemoFailed(f"{crash.key} has no {crash.effect} effect in the ledger")

    # -- the story -------------------------------------------------------------------------

    def start_orders(self) -> None:
        from ledgerflow.demo.order import registry, sample_order

        table = Table(title=f"started {self.orders} orders", title_justify="left")
        table.add_column("business key")
        table.add_column("instance", no_wrap=True)
        table.add_column("total")
        table.add_column("start")
        with SyncEngine(self.db_url, registry) as engine:
            for number in range(1, self.orders + 1):
                request = sample_order(number)
                started = engine.start("order", key=f"order-{number}", input=request)
                self.keys_by_id[started.instance_id] = started.instance.business_key
                total = sum(i["quantity"] * i["unit_price_cents"] for i in request["items"])
                table.add_row(
                    cell(started.instance.business_key),
                    cell(started.instance_id),
                    cell(f"{total / 100:.2f} {request['currency']}"),
                    cell("created" if started.created else "already existed"),
                )
            print_table(self.out, table)
            again = engine.start("order", key="order-1", input=sample_order(1))
            verb = "already existed" if not again.created else "was created AGAIN (wrong)"
            self.out.print(
                f"starting order-1 a second time: {again.instance_id} {verb}; "
                "a business key names one instance"
            )

    def crash_generation(self, crash: Crash) -> None:
        pid, code = self.run_worker(crash)
        gen = self.generation
        if code == 0:
            self.out.print(
                Text(
                    f"worker generation {gen} (pid {pid}) finished without reaching "
                    f"{crash.point} of {crash.key} {crash.effect}; the fault did not fire",
                    style="yellow",
                )
            )
            return
        if code != -signal.SIGKILL:
            raise DemoFailed(
                f"worker generation {gen} exited with {code}, not by its planned SIGKILL; "
                f"log {self.worker_log}:\n" + _tail(self.worker_log)
            )
        self.out.print(
            Text.assemble(
                ("✗ ", "bold red"),
                f"worker generation {gen} (pid {pid}) killed at {crash.point}, "
                f"{crash.key} {crash.effect}: {crash.meaning}",
            )
        )
        with SyncEngine(self.db_url, _empty_registry()) as engine:
            record, effect = self.effect_of(engine, crash)
        received, applied = self.count_at_participant(effect)
        self.out.print(
            f"    engine ledger: {crash.effect} {effect.state.value} (attempt {effect.attempt}), "
            f"instance {record.status.value} held by the dead worker's lease "
            f"(generation {record.generation})"
        )
        self.out.print(
            f"    {effect.participant}'s own ledger: received the key {received}x, "
            f"applied it {applied}x"
        )
        self.out.print(f"    next: {crash.recovery}")

    def recovery_report(self, crashes: list[Crash]) -> None:
        if not crashes:
            return
        self.out.print()
        self.out.print(Text("how each crash was resolved", style="bold"))
        with SyncEngine(self.db_url, _empty_registry()) as engine:
            for crash in crashes:
                record, effect = self.effect_of(engine, crash)
                trail = [
                    f"{e.to_state}" + (f" ({e.detail})" if e.detail else "")
                    for e in engine.detail(record.instance_id).timeline
                    if e.subject == f"effect:{effect.seq}"
                ]
                received, applied = self.count_at_participant(effect)
                # A transition's detail can quote a participant's answer: inert.
                self.out.print(Text(f"  {crash.key} {crash.effect}: " + inert(" -> ".join(trail))))
                self.out.print(
                    f"    key {effect.idempotency_key} (unchanged across attempts); "
                    f"received {received}x, applied {applied}x at {effect.participant}"
                )
                if crash.effect == "payment.charge":
                    receipt = json.loads(effect.evidence or "{}")
                    self.out.print(
                        "    payment has no lookup, so the doubt was settled by re-dispatch "
                        "under the same key; it deduplicates, so it answered the duplicate "
                        f"with its first receipt (applied row #{receipt.get('applied_seq')})"
                    )

    # -- the verdict -----------------------------------------------------------------------

    def report(self) -> list[str]:
        """Print both ledgers and check them against each other; return the violations."""
        from ledgerflow.demo.order import registry

        violations: list[str] = []
        with SyncEngine(self.db_url, _empty_registry()) as engine:
            instances = sorted(
                engine.list(limit=ORDERS_MAX), key=lambda r: _order_number(r.business_key)
            )
            details = [engine.detail(r.instance_id) for r in instances]

        table = Table(title="instances", title_justify="left")
        table.add_column("key")
        table.add_column("status")
        table.add_column("gen", justify="right")
        table.add_column("steps")
        for detail in details:
            instance = detail.instance
            table.add_row(
                cell(instance.business_key),
                status_cell(instance.status),
                cell(instance.generation),
                steps_cell(detail.steps),
            )
            if instance.status not in TERMINAL_STATUSES:
                violations.append(f"{instance.business_key} is not terminal: {instance.status}")
            elif instance.status is not InstanceStatus.SUCCEEDED:
                violations.append(
                    f"{instance.business_key} ended {instance.status.value}: {instance.reason}"
                )
        self.out.print()
        print_table(self.out, table)

        effects = [(d.instance.business_key, e) for d in details for e in d.effects]
        key_owner: dict[str, tuple[str, EffectRecord]] = {
            e.idempotency_key: (business_key, e) for business_key, e in effects
        }
        table = Table(title="effect ledger (the engine's)", title_justify="left")
        for name in ("order", "seq", "effect", "classification", "state", "att", "key"):
            table.add_column(name, justify="right" if name in ("seq", "att") else "left")
        for business_key, effect in effects:
            table.add_row(
                cell(business_key),
                cell(effect.seq),
                cell(f"{effect.participant}.{effect.operation}"),
                cell(effect.classification),
                cell(effect.state.value),
                cell(effect.attempt),
                cell(effect.idempotency_key),
            )
        self.out.print()
        print_table(self.out, table)

        applied_counts: dict[str, Counter[str]] = {}
        for name in registry.participants:
            ledger = self.participant_ledger(name)
            applied_counts[name] = Counter(row["key"] for row in ledger["applied"])
            table = Table(
                title=f"{name}'s own ledger: {len(ledger['received'])} requests received, "
                f"{len(ledger['applied'])} applied, "
                f"keys fenced by lookups: {len(ledger['fenced'])}",
                title_justify="left",
            )
            for column in ("#", "order", "operation", "attempt", "payload"):
                table.add_column(column, justify="right" if column in ("#", "attempt") else "left")
            for row in ledger["applied"]:
                owner = key_owner.get(row["key"])
                table.add_row(
                    cell(row["seq"]),
                    cell(owner[0] if owner else f"? {row['key']}"),
                    cell(row["operation"]),
                    cell(row["attempt"]),
                    cell(json.dumps(row["payload"], sort_keys=True)),
                )
            self.out.print()
            print_table(self.out, table)

        table = Table(title="verification", title_justify="left")
        for column in ("participant", "effects", "confirmed", "applied rows", "most per key"):
            table.add_column(column, justify="left" if column == "participant" else "right")
        for name, counts in applied_counts.items():
            mine = [e for _, e in effects if e.participant == name]
            for effect in mine:
                times = counts.get(effect.idempotency_key, 0)
                where = f"{key_owner[effect.idempotency_key][0]} {name}.{effect.operation}"
                if effect.state is EffectState.CONFIRMED and times != 1:
                    violations.append(f"{where} is CONFIRMED but was applied {times}x")
                elif effect.state is EffectState.FAILED and times != 0:
                    violations.append(f"{where} is FAILED but was applied {times}x")
                elif effect.state not in (EffectState.CONFIRMED, EffectState.FAILED):
                    violations.append(f"{where} is still {effect.state.value}")
            for applied_key in counts:
                if applied_key not in key_owner:
                    violations.append(
                        f"{name} applied {applied_key!r}, which the engine never intended"
                    )
            table.add_row(
                cell(name),
                cell(len(mine)),
                cell(sum(1 for e in mine if e.state is EffectState.CONFIRMED)),
                cell(sum(counts.values())),
                cell(max(counts.values(), default=0)),
            )
        self.out.print()
        print_table(self.out, table)
        return violations


def _empty_registry() -> Registry:
    # Reading the ledgers needs no workflow code.
    return Registry()


def _order_number(key: str) -> int:
    _, _, number = key.rpartition("-")
    return int(number) if number.isdigit() else 0


def _prepare_folder(directory: Path | None) -> tuple[Path, bool]:
    """The demo's folder and whether it is a temporary one this run created."""
    if directory is None:
        return Path(tempfile.mkdtemp(prefix="ledgerflow-demo-")), True
    if directory.exists() and any(directory.iterdir()):
        # A reused folder would mix earlier participants' ledgers into this run's verdict.
        raise click.BadParameter(
            f"{directory} is not empty; the demo needs a fresh folder", param_hint="'--dir'"
        )
    directory.mkdir(parents=True, exist_ok=True)
    return directory.resolve(), False


@click.command()
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="A new or empty folder for the journal, the participants' ledgers and the logs "
    "(default: a new temporary folder).",
)
@click.option(
    "--orders",
    type=click.IntRange(1, ORDERS_MAX),
    default=ORDERS_DEFAULT,
    show_default=True,
    help="How many orders to start (order-1 .. order-N).",
)
@click.option("--keep", is_flag=True, help="Keep the temporary folder (a --dir is always kept).")
@log_format_option
def demo(directory: Path | None, orders: int, keep: bool, log_format: str) -> None:
    """Run orders across four participant services while workers are killed mid-flight.

    Starts a participant service and worker processes; the first workers SIGKILL themselves
    at chosen gaps of the effect protocol, fresh workers recover, and finally both sides'
    ledgers are compared: exit 1 if any effect was applied more or less than once.
    """
    # The participant service is a Starlette app under uvicorn.
    require_extra("http", purpose="ledgerflow demo (its participant service)")
    configure_logging(log_format)
    began = time.monotonic()
    folder, temporary = _prepare_folder(directory)
    out = console()
    run = Demo(folder, orders, out, log_format=log_format)
    out.print(Text(f"Ledgerflow demo in {folder}", style="bold"))
    out.print(f"  journal      {run.db_url}")
    out.print(f"  worker log   {run.worker_log}")
    out.print(f"  service log  {run.service_log}")
    succeeded = False
    try:
        with run.service() as url:
            out.print(
                f"participant service at {url}: inventory (lookup), payment (dedupe), "
                "shipping (dedupe+lookup), email (dedupe)"
            )
            out.print()
            run.start_orders()
            out.print()
            crashes = [crash for crash in CRASHES if crash.order <= orders]
            for crash in crashes:
                run.crash_generation(crash)
            pid, code = run.run_worker(None)
            if code != 0:
                raise DemoFailed(
                    f"the clean worker (generation {run.generation}) exited with {code}; "
                    f"log {run.worker_log}:\n" + _tail(run.worker_log)
                )
            out.print(
                Text.assemble(
                    ("✓ ", "bold green"),
                    f"worker generation {run.generation} (pid {pid}, no faults) ran until idle",
                )
            )
            run.recovery_report(crashes)
            violations = run.report()
        out.print()
        if violations:
            for violation in violations:
                out.print(Text(f"VIOLATION: {violation}", style="bold red"))
            raise DemoFailed(f"{len(violations)} violation(s); ledgers kept in {folder}")
        out.print(Text("no effect applied twice: OK", style="bold green"))
        succeeded = True
    finally:
        elapsed = time.monotonic() - began
        if temporary and not keep and succeeded:
            shutil.rmtree(folder, ignore_errors=True)
            out.print(f"done in {elapsed:.1f}s; removed {folder} (pass --keep to keep it)")
        else:
            out.print(f"done in {elapsed:.1f}s; everything is kept in {folder}")


def register(group: click.Group) -> None:
    group.add_command(demo)
