"""``ledgerflow verify``: explore a workflow under faults and print its report (internal).

This module owns the command line around :mod:`ledgerflow.testing`: finding the workflow
definition from ``MODULE:OBJECT``, choosing its inputs, running the explorer's exhaustive and
random modes, keeping failing seeds in a seed bank, and rendering the consistency report of
:mod:`ledgerflow.testing.report` as rich tables or one JSON document. The exit code is the
verdict (0: no violation; 1: at least one), so CI can gate a deploy on it.

Nothing here touches a real store or a real participant: the explorer runs the user's workflow
code against scripted twins of its participants, in temporary SQLite files it removes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
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
from rich.table import Table
from rich.text import Text

from ledgerflow import limits
from ledgerflow.cli.json_input import json_option_value
from ledgerflow.cli.loading import import_target
from ledgerflow.cli.options import json_option
from ledgerflow.cli.render import cell, console, print_table
from ledgerflow.errors import LedgerflowError
from ledgerflow.log_muting import muted
from ledgerflow.model.definition import Registry, WorkflowDefinition
from ledgerflow.testing.explorer import Explorer, SeedBank, Summary
from ledgerflow.testing.report import (
    ConsistencyReport,
    build_report,
    failure_trace,
    faults_in_order,
)
from ledgerflow.testing.simulation import RunResult, ScenarioFactory, scenario_for

# A bound on one invocation's random mode; CI budgets are far below it.
SEEDS_MAX = 1_000_000
INSTANCES_DEFAULT = 10
# How much of a failure the terminal shows; ``--json`` has every violation.
VIOLATIONS_SHOWN_MAX = 20
LABELS_SHOWN_MAX = 10


@dataclass(slots=True)
class Exploration:
    """What the explorer runs produced, with the seed order random mode used."""

    summaries: list[Summary] = field(default_factory=list)
    banked: list[int] = field(default_factory=list)
    seeds_run: list[int] = field(default_factory=list)
    seed_of: dict[str, int] = field(default_factory=dict)

    @property
    def violations(self) -> int:
        return sum(summary.violations for summary in self.summaries)

    @property
    def failed_seeds(self) -> list[int]:
        return [
            self.seed_of[run.label]
            for summary in self.summaries
            for run in summary.failures
            if run.label in self.seed_of
        ]


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


def choose_inputs(texts: Sequence[str], definition: WorkflowDefinition) -> list[Any]:
    if texts:
        return [json_option_value(text, "--input") for text in texts]
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
    """Exhaustive and arrivals modes on ``single`` (unless ``depth`` is None), then random
    mode on ``crowd`` for the banked seeds and ``0..seeds-1``; every failing seed goes into the
    bank at once."""
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


# -- rendering -----------------------------------------------------------------------------------


def failures_json(found: Exploration) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for summary in found.summaries:
        shortest = summary.shortest_failure()
        if shortest is None:
            continue
        out.append(
            {
                "mode": summary.mode,
                "runs_failed": [run.label for run in summary.failures],
                "shortest": {
                    "label": shortest.label,
                    "seed": found.seed_of.get(shortest.label),
                    "violations": [str(v) for v in shortest.violations],
                    "fired": faults_in_order(shortest),
                    "trace": failure_trace(shortest),
                },
            }
        )
    return out


def report_json(report: ConsistencyReport, found: Exploration, inputs: int) -> dict[str, Any]:
    document = report.to_dict()
    document["inputs"] = inputs
    document["seeds"] = {
        "banked": found.banked,
        "run": found.seeds_run,
        "failed": found.failed_seeds,
    }
    document["failures"] = failures_json(found)
    document["violations"] = found.violations
    return document


def _grid(rows: Sequence[tuple[str, object]]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for name, value in rows:
        grid.add_row(name, cell(value))
    return grid


def effects_table(report: ConsistencyReport) -> Table:
    table = Table(title="effects", title_justify="left")
    table.add_column("effect", no_wrap=True)
    table.add_column("classification")
    table.add_column("UNKNOWN resolved by")
    table.add_column("compensation")
    table.add_column("limits")
    for effect in report.effects:
        pivot = " (pivot)" if effect.pivot else ""
        table.add_row(
            cell(effect.effect),
            cell(effect.classification + pivot),
            cell(effect.unknown_resolution),
            cell(effect.compensation),
            cell(
                f"{effect.attempts_max} attempts, {effect.backoff}, "
                f"timeout {effect.timeout_seconds:g}s"
            ),
        )
    return table


def figures_table(summaries: Sequence[Summary]) -> Table:
    table = Table(title="explorer figures", title_justify="left")
    table.add_column("figure", no_wrap=True)
    figures = [summary.figures() for summary in summaries]
    for one in figures:
        table.add_column(str(one["mode"]), justify="right")
    names = [name for name in figures[0] if name != "mode"]
    for name in names:
        values = []
        for one in figures:
            value = one[name]
            if isinstance(value, dict):
                value = ", ".join(f"{k} {v}" for k, v in sorted(value.items())) or "-"
            values.append(cell(value))
        table.add_row(cell(name.replace("_", " ")), *values)
    return table


def print_report(out: Console, report: ConsistencyReport) -> None:
    out.print(
        Text.assemble(
            ("consistency report: ", "bold"),
            f"{report.workflow} v{report.version} (pinned), fingerprint {report.fingerprint}",
        )
    )
    out.print()
    out.print(Text("identities", style="bold"))
    out.print(_grid(list(report.identities.items())))
    out.print()
    print_table(out, effects_table(report))
    step = report.step_retry
    out.print(
        _grid(
            [
                ("step retry", f"{step['attempts_max']} attempts, {step['backoff']}"),
                ("step retries on", ", ".join(step["retry_on"])),
                ("lease default", f"{report.lease_seconds_default:g}s"),
                ("owners", report.owners),
                ("versions", report.pinning),
                ("business failures", "; ".join(report.business_failures)),
                ("defects", report.defects),
            ]
        )
    )
    out.print()
    if report.warnings:
        out.print(Text(f"warnings ({len(report.warnings)})", style="bold yellow"))
        for warning in report.warnings:
            out.print(Text(f"  - {warning}"))
    else:
        out.print(Text("warnings: none"))


def print_failure(out: Console, summary: Summary, found: Exploration) -> None:
    shortest = summary.shortest_failure()
    if shortest is None:
        return
    labels = [run.label for run in summary.failures]
    more = f" and {len(labels) - LABELS_SHOWN_MAX} more" if len(labels) > LABELS_SHOWN_MAX else ""
    out.print()
    out.print(Text(f"{summary.mode}: {len(labels)} failing run(s)", style="bold red"))
    out.print(Text("  runs: " + ", ".join(labels[:LABELS_SHOWN_MAX]) + more))
    seed = found.seed_of.get(shortest.label)
    replay = f" (replay: seed {seed})" if seed is not None else ""
    out.print(Text(f"  shortest failing run: {shortest.label}{replay}", style="bold"))
    for violation in shortest.violations[:VIOLATIONS_SHOWN_MAX]:
        out.print(Text(f"    {violation}"))
    if len(shortest.violations) > VIOLATIONS_SHOWN_MAX:
        hidden = len(shortest.violations) - VIOLATIONS_SHOWN_MAX
        out.print(Text(f"    ... and {hidden} more (see --json)"))
    out.print(Text("  faults injected (crashes and engine errors):"))
    for fired in faults_in_order(shortest) or ["(none: the run failed without a fault)"]:
        out.print(Text(f"    {fired}"))
    out.print(Text("  shortest failing trace:"))
    for line in failure_trace(shortest):
        out.print(Text(f"    {line}"))


def print_exploration(out: Console, found: Exploration) -> None:
    if not found.summaries:
        out.print(Text("not explored: --no-exhaustive and --seeds 0 run nothing"))
        return
    if found.seeds_run:
        banked = ", ".join(map(str, found.banked)) or "none"
        out.print(Text(f"random seeds: from the seed bank first ({banked}), then 0..N-1"))
    print_table(out, figures_table(found.summaries))
    for summary in found.summaries:
        print_failure(out, summary, found)
    runs = sum(s.runs for s in found.summaries)
    executions = sum(s.executions for s in found.summaries)
    style = "bold green" if found.violations == 0 else "bold red"
    out.print()
    out.print(
        Text(
            f"verdict: {found.violations} violations in {runs} runs ({executions} executions)",
            style=style,
        )
    )


# -- the command ---------------------------------------------------------------------------------


@click.command()
@click.argument("target", metavar="MODULE:OBJECT")
@click.option("--workflow", help="Workflow name, when MODULE:OBJECT is a registry.")
@click.option(
    "--exhaustive/--no-exhaustive",
    default=True,
    show_default=True,
    help="Crash at every fault point of one instance per input (and during its recovery).",
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
    seed_bank: Path | None,
    as_json: bool,
) -> None:
    """Explore a workflow under injected faults and print its consistency report.

    MODULE:OBJECT is a workflow function decorated with @registry.workflow(...), or a registry
    with --workflow NAME. Exits 1 if any run violates an invariant, printing the seed or run
    label and the shortest failing trace.
    """
    registry, definition = resolve_target(target, workflow)
    inputs = choose_inputs(input_texts, definition)
    found = explore(
        single=scenario_for(registry, definition.name, inputs),
        crowd=scenario_for(registry, definition.name, inputs, copies=instances),
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
        print_exploration(out, found)
    if found.violations:
        # Not ctx.exit(1): under main()'s standalone_mode=False, click returns that code
        # instead of exiting with it, and the process would exit 0.
        raise SystemExit(1)


def register(group: click.Group) -> None:
    group.add_command(verify)
