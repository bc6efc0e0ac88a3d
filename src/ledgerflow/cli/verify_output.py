"""What ``ledgerflow verify`` prints: the consistency report, the explorer's figures, the
coverage of the workflow, failures with their shortest trace, as rich tables or one JSON
document (internal).

The report itself is data (:mod:`ledgerflow.testing.report`); this module only renders it and
the exploration behind it, so the command module keeps to reading options and running modes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ledgerflow.cli.render import cell, print_table
from ledgerflow.testing.explorer import Summary
from ledgerflow.testing.report import (
    ConsistencyReport,
    CoverageReport,
    failure_trace,
    faults_in_order,
)

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


def coverage_table(coverage: CoverageReport) -> Table:
    table = Table(title=f"coverage ({coverage.runs} runs)", title_justify="left")
    table.add_column("item", no_wrap=True)
    table.add_column("kind")
    table.add_column("at")
    for name in ("reached", "completed", "crashed at", "recovered past"):
        table.add_column(name, justify="right")
    for row in coverage.items:
        style = "bold yellow" if not row.reached else ""
        reached = f"{row.reached}" if row.reached else "0 (never)"
        table.add_row(
            cell(row.name),
            cell(row.kind),
            cell(", ".join(f"s{n}" for n in row.positions) or "-"),
            cell(reached),
            cell(row.completed),
            cell(row.crashed),
            cell(row.recovered),
            style=style,
        )
    return table


def print_coverage(out: Console, coverage: CoverageReport | None) -> None:
    if coverage is None:
        return
    out.print()
    print_table(out, coverage_table(coverage))
    waiting = (
        f"{coverage.runs_non_terminal} ({coverage.instances_non_terminal} instance(s) WAITING "
        "with nothing left to deliver)"
        if coverage.runs_non_terminal
        else "0"
    )
    rows = [
        ("never reached", ", ".join(coverage.unreached) or "none"),
        ("runs ending non-terminal", waiting),
        (
            "non vacuity",
            f"{coverage.non_vacuity:.2f} (the share of the workflow's {coverage.effects} "
            f"effect{'' if coverage.effects == 1 else 's'} a fault touched in a run that "
            "still ended)",
        ),
    ]
    if coverage.defaulted_events:
        rows.append(
            (
                "default arrivals",
                ", ".join(coverage.defaulted_events)
                + " got a null payload (script them with --arrivals or Example(events=...))",
            )
        )
    out.print(_grid(rows))


def print_exploration(out: Console, found: Exploration, report: ConsistencyReport) -> None:
    if not found.summaries:
        out.print(Text("not explored: --no-exhaustive and --seeds 0 run nothing"))
        return
    if found.seeds_run:
        banked = ", ".join(map(str, found.banked)) or "none"
        out.print(Text(f"random seeds: from the seed bank first ({banked}), then 0..N-1"))
    print_table(out, figures_table(found.summaries))
    print_coverage(out, report.coverage)
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
