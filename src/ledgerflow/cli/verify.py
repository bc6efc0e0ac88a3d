"""``ledgerflow verify``: explore a workflow under faults and print its report (internal).

This module owns the command line around :mod:`ledgerflow.testing`: finding the workflow
definition from ``MODULE:OBJECT``, choosing its inputs and the arrivals its waits need
(``--arrivals FILE``, ``Example(events=...)``), running the explorer's exhaustive, refusals,
arrivals and random modes, and keeping failing seeds in a seed bank;
:mod:`ledgerflow.cli.verify_output` renders the consistency report of
:mod:`ledgerflow.testing.report` as rich tables or one JSON document. The exit code is the
verdict (0: no violation; 1: at least one, or, with ``--require-coverage``, an effect, pivot,
compensation or wait of the workflow that no run reached), so CI can gate a deploy on it.

Nothing here touches a real store or a real participant: the explorer runs the user's workflow
code against scripted twins of its participants, in temporary SQLite files it removes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from ledgerflow import limits
from ledgerflow.cli.json_input import json_option_value
from ledgerflow.cli.loading import import_target
from ledgerflow.cli.options import json_option
from ledgerflow.cli.render import console
from ledgerflow.cli.verify_output import Exploration, print_exploration, print_report, report_json
from ledgerflow.errors import LedgerflowError
from ledgerflow.log_muting import muted
from ledgerflow.model.definition import Registry, WorkflowDefinition
from ledgerflow.model.examples import ArrivalsFile, parse_arrivals_file
from ledgerflow.testing.explorer import Explorer, SeedBank
from ledgerflow.testing.report import ConsistencyReport, build_report
from ledgerflow.testing.simulation import RunResult, ScenarioFactory, scenario_for

# A bound on one invocation's random mode; CI budgets are far below it.
SEEDS_MAX = 1_000_000
INSTANCES_DEFAULT = 10


# -- finding the definition and its inputs -------------------------------------------------------


def resolve_target(target: str, workflow: str | None) -> tuple[Registry, WorkflowDefinition]:
    """A decorated workflow function names its registry and version; a registry needs a name."""
    found = import_target(target)
    entries = getattr(found, "__dict__", {}).get("__ledgerflow__")
    try:
        if isinstance(found, Registry):
            names = sorted({d.name for d in found.definitions()})
            if workflow is None and len(names) != 1:
                raise click.UsageError(
                    f"{target} holds workflows {names or 'none'}: choose one with --workflow NAME"
                )
            return found, found.get(workflow or names[0])
        if entries:
            # A function registered several times answers for its latest registration.
            registry, name, version = entries[-1]
            if workflow is not None and workflow != name:
                raise click.UsageError(f"{target} is workflow {name!r}, not {workflow!r}")
            return registry, registry.get(name, version)
    except LedgerflowError as exc:
        raise click.UsageError(str(exc)) from None
    raise click.BadParameter(
        f"{target} is {type(found).__name__}, neither a workflow function decorated with "
        "@registry.workflow(...) nor a ledgerflow.Registry",
        param_hint="TARGET",
    )


def read_arrivals(path: Path | None) -> ArrivalsFile:
    """The ``--arrivals`` file: not JSON is a command line error, a wrong shape LF107."""
    if path is None:
        return ArrivalsFile(events={}, inputs=())
    return parse_arrivals_file(json_option_value(f"@{path}", "--arrivals"))


def choose_inputs(
    texts: Sequence[str], definition: WorkflowDefinition, arrivals: ArrivalsFile
) -> list[Any]:
    """``--input`` values and the arrivals file's inputs; else the definition's examples."""
    given = [json_option_value(text, "--input") for text in texts]
    inputs: list[Any] = [*given, *arrivals.inputs]
    if inputs:
        return inputs
    if definition.examples:
        return list(definition.examples)
    raise click.UsageError(
        f"workflow {definition.name} v{definition.version} has no inputs to explore: "
        "pass --input JSON (repeatable) or declare examples=[...] in @registry.workflow(...)"
    )


# -- running the explorer ------------------------------------------------------------------------


def _progress_console() -> Console:
    # stderr, so that piped and --json output stay clean.
    return console(stderr=True)


class _Progress:
    """A progress bar per explorer mode on a terminal; nothing at all anywhere else."""

    def __init__(self, bars: Progress | None) -> None:
        self._bars = bars

    def mode(self, name: str, total: int | None) -> Callable[[RunResult], None]:
        """A callback for each finished run of one mode (``total`` None: not known ahead)."""
        bars = self._bars
        if bars is None:
            return lambda _result: None
        task = bars.add_task(name, total=total)
        return lambda _result: bars.advance(task)


@contextlib.contextmanager
def _progress() -> Iterator[_Progress]:
    out = _progress_console()
    if not out.is_terminal:
        yield _Progress(None)
        return
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("runs"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=out, transient=True) as bars:
        yield _Progress(bars)


def explore(
    *,
    single: ScenarioFactory,
    crowd: ScenarioFactory,
    depth: int | None,
    seeds: int,
    bank: SeedBank | None,
) -> Exploration:
    """Exhaustive, refusals and arrivals modes on ``single`` (unless ``depth`` is None), then
    random mode on ``crowd`` for the banked seeds and ``0..seeds-1``; every failing seed goes
    into the bank at once."""
    found = Exploration()
    with (
        tempfile.TemporaryDirectory(prefix="ledgerflow-verify-") as folder,
        # Each simulated crash leaves the dead worker's tasks to fail their next commit on a
        # closed store, and the executor logs each one at ERROR: expected in a simulation, and
        # dozens per sweep. The oracle, not the log, judges every run.
        muted("ledgerflow"),
        _progress() as progress,
    ):
        if depth is not None:
            explorer = Explorer(single, folder=Path(folder))
            # How many runs a sweep makes is learnt while it runs: the bar only counts.
            counted = progress.mode("exhaustive", None)
            found.summaries.append(asyncio.run(explorer.exhaustive(depth=depth, progress=counted)))
            # Each effect a path reached refused for good, and a crash in the compensation.
            refusing = progress.mode("refusals", None)
            found.summaries.append(asyncio.run(explorer.refusals(progress=refusing)))
            # A cancel request, then a signal, at every point of the instance's life.
            arriving = progress.mode("arrivals", None)
            found.summaries.append(asyncio.run(explorer.arrivals(progress=arriving)))
        if seeds > 0:
            found.banked = bank.seeds() if bank is not None else []
            found.seeds_run = [*found.banked, *(s for s in range(seeds) if s not in found.banked)]
            shown = progress.mode("random", len(found.seeds_run))

            def keep(result: RunResult) -> None:
                # Called once per seed, in order: the result's seed is the next one.
                seed = found.seeds_run[len(found.seed_of)]
                found.seed_of[result.label] = seed
                if bank is not None and not result.ok:
                    bank.add(seed)
                shown(result)

            explorer = Explorer(crowd, folder=Path(folder))
            found.summaries.append(asyncio.run(explorer.random(found.seeds_run, progress=keep)))
    return found


# -- the command ---------------------------------------------------------------------------------


@click.command()
@click.argument("target", metavar="MODULE:OBJECT")
@click.option("--workflow", help="Workflow name, when MODULE:OBJECT is a registry.")
@click.option(
    "--exhaustive/--no-exhaustive",
    default=True,
    show_default=True,
    help="On every path through the waits of one instance per input: crash at every fault "
    "point (and during its recovery), refuse each effect, cancel and signal at every point.",
)
@click.option(
    "--depth",
    type=click.IntRange(1, 2),
    default=2,
    show_default=True,
    help="Exhaustive depth: 1 crash per run, or 2 (a crash during recovery too).",
)
@click.option(
    "--seeds",
    type=click.IntRange(0, SEEDS_MAX),
    default=0,
    show_default=True,
    help="Random mode: run seeds 0..N-1 (0 skips random mode).",
)
@click.option(
    "--instances",
    type=click.IntRange(1, limits.WORKER_CONCURRENCY_MAX),
    default=INSTANCES_DEFAULT,
    show_default=True,
    help="Random mode: concurrent instances per input in each seed's run.",
)
@click.option(
    "--input",
    "input_texts",
    multiple=True,
    help="A workflow input as JSON (repeatable; default: the definition's examples).",
)
@click.option(
    "--arrivals",
    "arrivals_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSON file of what may arrive at the workflow's waits: per event name, payloads and "
    "senders to try (and inputs with events of their own); see the README.",
)
@click.option(
    "--require-coverage",
    is_flag=True,
    help="Exit 1 if an effect, pivot, compensation or wait of the workflow was reached by no run.",
)
@click.option(
    "--seed-bank",
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSON file of seeds that once failed: run first, and failing seeds are added.",
)
@json_option
def verify(
    target: str,
    workflow: str | None,
    exhaustive: bool,
    depth: int,
    seeds: int,
    instances: int,
    input_texts: tuple[str, ...],
    arrivals_path: Path | None,
    require_coverage: bool,
    seed_bank: Path | None,
    as_json: bool,
) -> None:
    """Explore a workflow under injected faults and print its consistency report.

    MODULE:OBJECT is a workflow function decorated with @registry.workflow(...), or a registry
    with --workflow NAME. Exits 1 if any run violates an invariant, printing the seed or run
    label and the shortest failing trace, and, with --require-coverage, if some effect,
    pivot, compensation or wait of the workflow was reached by no run.
    """
    registry, definition = resolve_target(target, workflow)
    arrivals = read_arrivals(arrivals_path)
    inputs = choose_inputs(input_texts, definition, arrivals)
    found = explore(
        single=scenario_for(registry, definition.name, inputs, events=arrivals.events),
        crowd=scenario_for(
            registry, definition.name, inputs, copies=instances, events=arrivals.events
        ),
        depth=depth if exhaustive else None,
        seeds=seeds,
        bank=SeedBank(seed_bank) if seed_bank is not None else None,
    )
    report = build_report(registry, definition, summaries=found.summaries)
    if as_json:
        click.echo(json.dumps(report_json(report, found, len(inputs)), indent=2, sort_keys=True))
    else:
        out = console()
        print_report(out, report)
        out.print()
        print_exploration(out, found, report)
    gap = coverage_gap(report) if require_coverage else None
    if gap is not None:
        click.echo(f"error: {gap}", err=True)
    if found.violations or gap is not None:
        # Not ctx.exit(1): under main()'s standalone_mode=False, click returns that code
        # instead of exiting with it, and the process would exit 0.
        raise SystemExit(1)


def coverage_gap(report: ConsistencyReport) -> str | None:
    """What ``--require-coverage`` refuses, in one line; None when every item was reached."""
    coverage = report.coverage
    if coverage is None:
        return "coverage required, but nothing was explored (--no-exhaustive and --seeds 0)"
    if coverage.unreached:
        return f"coverage required: never reached by any of {coverage.runs} runs: " + ", ".join(
            coverage.unreached
        )
    return None


def register(group: click.Group) -> None:
    group.add_command(verify)
