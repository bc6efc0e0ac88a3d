"""``ledgerflow verify`` and the consistency report behind it.

The command is registered on a click group built here (as ``cli/main.py`` will do) and run
in-process through click's ``CliRunner`` on the demo order workflow, whose four participants
cover every way an UNKNOWN outcome is settled. Broken-engine runs break one guarantee
(tests/breakages.py) for the length of one invocation. The report itself is also checked as
data, on registries built in the test, including against the real key derivations and
``resolve_unknown``.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from rich.console import Console

import breakages
import ledgerflow.cli.verify as verify_module
from ledgerflow import LookupAnswer, Participant, Registry
from ledgerflow.cli.verify import register
from ledgerflow.model.effect import ResolutionKind, resolve_unknown
from ledgerflow.model.ids import (
    DEFAULT_TENANT,
    BusinessKey,
    InstanceId,
    RunNumber,
    StepSeq,
    compensation_key,
    effect_id,
    idempotency_key,
)
from ledgerflow.runtime.engine import instance_id_for
from ledgerflow.testing.report import (
    NO_COMPENSATION,
    RESOLVED_BY_DEDUPE,
    RESOLVED_BY_LOOKUP,
    RESOLVED_BY_OPERATOR,
    build_report,
    failure_trace,
    faults_in_order,
    idempotency_key_pattern,
    unknown_resolution,
)
from ledgerflow.testing.simulation import RunResult

DEMO = "ledgerflow.demo.order:order"
# Kept small so each invocation takes about a second: one crash per run, a few seeds.
QUICK = ("--depth", "1", "--seeds", "3", "--instances", "2")
EXPECTED_RESOLUTIONS = {
    "inventory.reserve": RESOLVED_BY_LOOKUP,
    # The compensations are effects too, settled the same way at their participants.
    "inventory.release": RESOLVED_BY_LOOKUP,
    "payment.refund": RESOLVED_BY_DEDUPE,
    "payment.charge": RESOLVED_BY_DEDUPE,
    "shipping.ship": RESOLVED_BY_LOOKUP,
    "email.send_confirmation": RESOLVED_BY_DEDUPE,
}
MODULE_NAME = "verify_test_workflows"
MODULE_SOURCE = '''
"""A workflow without examples whose only participant can neither be asked nor deduplicate."""

from __future__ import annotations

from typing import Any

import ledgerflow as lf

registry = lf.Registry()
ledger = registry.add_participant(lf.Participant("ledger"))


@ledger.effect(classification="compensatable")
async def post(call: lf.EffectCall) -> dict[str, Any]:
    return {"posted": call.payload}


@registry.workflow(name="transfer", version=1)
async def transfer(ctx: lf.WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    receipt = await ctx.effect(post, {"euros": request["euros"]})
    return {"receipt": receipt}
'''

SHOP_NAME = "verify_test_shop"
SHOP_SOURCE = '''
"""Workflows that wait: the issue's order with an approval, a wait with no timeout, a branch no
example takes, and a branch that depends on what arrives."""

from __future__ import annotations

from typing import Any

import ledgerflow as lf

registry = lf.Registry()
stock = registry.add_participant(lf.Participant("stock", deduplicates=True))
bank = registry.add_participant(lf.Participant("bank", deduplicates=True))
carrier = registry.add_participant(lf.Participant("carrier", deduplicates=True))
perks = registry.add_participant(lf.Participant("perks", deduplicates=True))
books = registry.add_participant(lf.Participant("books", deduplicates=True))


@stock.effect(classification="reversible", compensation="release")
async def reserve(call: lf.EffectCall) -> dict[str, Any]:
    return {}


@stock.compensation("release")
async def release(call: lf.EffectCall) -> dict[str, Any]:
    return {}


@bank.effect(classification="compensatable", compensation="refund")
async def charge(call: lf.EffectCall) -> dict[str, Any]:
    return {}


@bank.compensation("refund")
async def refund(call: lf.EffectCall) -> dict[str, Any]:
    return {}


@carrier.effect(classification="forward-recovery-only")
async def ship(call: lf.EffectCall) -> dict[str, Any]:
    return {}


@carrier.effect(classification="forward-recovery-only")
async def fly(call: lf.EffectCall) -> dict[str, Any]:
    return {}


@perks.effect(classification="forward-recovery-only")
async def upgrade(call: lf.EffectCall) -> dict[str, Any]:
    return {}


@books.effect(classification="forward-recovery-only")
async def audit(call: lf.EffectCall) -> dict[str, Any]:
    return {}


@registry.workflow(name="order", version=1, examples=[{"order": 1}])
async def order(ctx: lf.WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    """Reserve, charge, wait for alice's approval (an hour at most), sleep, ship (the pivot)."""
    await ctx.effect(reserve, request)
    await ctx.effect(charge, request)
    await ctx.wait_for_approval("approval", approvers=["alice"], timeout=3600)
    await ctx.sleep(60)
    return {"shipment": await ctx.effect(ship, request)}


@registry.workflow(name="hold", version=1, examples=[{"order": 2}])
async def hold(ctx: lf.WorkflowContext, request: dict[str, Any]) -> Any:
    """Wait for a release with no timeout at all, then ship."""
    released = await ctx.wait_for("released")
    await ctx.effect(ship, request)
    return released.payload


@registry.workflow(name="perk", version=1, examples=[{"order": 3, "vip": False}])
async def perk(ctx: lf.WorkflowContext, request: dict[str, Any]) -> Any:
    """Upgrade only VIPs: no example is one, so the upgrade is never reached."""
    await ctx.effect(charge, request)
    if request["vip"]:
        await ctx.effect(upgrade, request)
    return await ctx.effect(ship, request)


def _by_air(signal: lf.Signal) -> bool:
    return isinstance(signal.payload, dict) and signal.payload.get("carrier") == "drone"


@registry.workflow(name="express", version=1, examples=[{"order": 4}])
async def express(ctx: lf.WorkflowContext, request: dict[str, Any]) -> Any:
    """Fly when the carrier chosen is a drone, else ship by van."""
    chosen = await ctx.wait_for("carrier", timeout=600)
    if _by_air(chosen):
        return await ctx.effect(fly, request)
    return await ctx.effect(ship, request)


DRONE_OR_VAN = {
    "carrier": [{"payload": {"carrier": "drone"}}, {"payload": {"carrier": "van"}}]
}


@registry.workflow(
    name="express_scripted", version=1, examples=[lf.Example({"order": 5}, events=DRONE_OR_VAN)]
)
async def express_scripted(ctx: lf.WorkflowContext, request: dict[str, Any]) -> Any:
    """The same choice, with the arrivals it needs in its example."""
    chosen = await ctx.wait_for("carrier", timeout=600)
    if _by_air(chosen):
        return await ctx.effect(fly, request)
    return await ctx.effect(ship, request)


@registry.workflow(name="bookkeeping", version=1, examples=[{"order": 6}])
async def bookkeeping(ctx: lf.WorkflowContext, request: dict[str, Any]) -> Any:
    """Another workflow of the module: its participant is none of order's."""
    return await ctx.effect(audit, request)
'''

Invoke = Callable[..., Result]


@pytest.fixture
def invoke() -> Invoke:
    group = click.Group("ledgerflow")
    register(group)
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(group, ["verify", *args])

    return run


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    (tmp_path / f"{MODULE_NAME}.py").write_text(MODULE_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield MODULE_NAME
    sys.modules.pop(MODULE_NAME, None)


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    (tmp_path / f"{SHOP_NAME}.py").write_text(SHOP_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield SHOP_NAME
    sys.modules.pop(SHOP_NAME, None)


def _broken(invoke: Invoke, breakage: str, *args: str) -> Result:
    with breakages.broken(breakage):
        return invoke(*args)


def _section(output: str, title: str) -> str:
    """The lines of one table of the text report, from its title to the next blank line."""
    lines = output.splitlines()
    start = next(n for n, line in enumerate(lines) if line.strip().startswith(title))
    end = next((n for n in range(start, len(lines)) if not lines[n].strip()), len(lines))
    return "\n".join(lines[start:end])


def _line_with(output: str, text: str, *, table: str = "effects") -> str:
    section = _section(output, table)
    [line] = [line for line in section.splitlines() if text in line and "│" in line]
    return line


# -- the command on the demo order workflow ------------------------------------------------------


def test_demo_order_verifies_clean_with_every_resolution_named(invoke: Invoke) -> None:
    """Goal: verify prints the report of the demo order workflow and finds nothing wrong.

    Method: run verify on ``ledgerflow.demo.order:order`` (exhaustive depth 1, 3 seeds x 2
    instances per example); the exit code is 0, each of the four effects' table row names its
    UNKNOWN resolution (lookup for inventory and shipping, same-key re-dispatch for payment and
    email), the pivot is marked, and the figures and the verdict show 0 violations.
    """
    result = invoke(DEMO, *QUICK)
    assert result.exit_code == 0, result.output
    for effect, resolution in EXPECTED_RESOLUTIONS.items():
        assert resolution in _line_with(result.output, effect), effect
    assert "(pivot)" in _line_with(result.output, "shipping.ship")
    assert idempotency_key_pattern() in result.output
    assert "compensate:" in result.output
    assert "fencing generation" in result.output
    assert "exhaustive depth 1" in result.output
    assert "random" in result.output
    line = _line_with(result.output, "violations", table="explorer")
    cells = [c.strip() for c in line.split("│")]
    assert cells[1:4] == ["violations", "0", "0"]
    assert "verdict: 0 violations" in result.output


def test_json_output_has_the_report_and_both_modes_figures(invoke: Invoke) -> None:
    """Goal: ``--json`` prints one parseable document with the report, figures and failures.

    Method: run verify with ``--json``; parse stdout; it names the pinned version and
    fingerprint, every effect (compensations included) with its resolution, and one figures
    entry per mode (exhaustive, arrivals of cancel requests and signals, random), each with 0
    violations and some executions; the failures list is empty.
    """
    result = invoke(DEMO, *QUICK, "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["workflow"], document["version"]) == ("order", 1)
    assert len(document["fingerprint"]) == 32
    resolutions = {e["effect"]: e["unknown_resolution"] for e in document["effects"]}
    assert resolutions == EXPECTED_RESOLUTIONS
    figures = {f["mode"]: f for f in document["figures"]}
    assert set(figures) == {"exhaustive depth 1", "refusals", "arrivals", "random"}
    assert figures["arrivals"]["cancel_requests"] > 0
    assert figures["arrivals"]["signals"] > 0
    for one in figures.values():
        assert one["violations"] == 0
        assert one["executions"] > 0
    assert document["seeds"]["run"] == [0, 1, 2]
    assert document["failures"] == []
    assert document["violations"] == 0


def test_a_broken_engine_fails_with_the_shortest_trace(invoke: Invoke) -> None:
    """Goal: with the write-ahead intent skipped, verify exits 1 and shows how it failed.

    Method: break the engine with ``intent-after-dispatch`` for one exhaustive depth-1 run; the
    exit code is 1, and the output names the violated invariant ``no-duplicate-effect``, the failing
    run's label, the injected fault (marked in the trace) and a non-zero verdict; with
    ``--json`` the same failure is one entry of ``failures`` with its violations and trace.
    """
    result = _broken(invoke, breakages.INTENT_AFTER_DISPATCH, DEMO, "--depth", "1")
    assert result.exit_code == 1, result.output
    assert "no-duplicate-effect" in result.output
    assert "shortest failing run: crash-" in result.output
    assert "shortest failing trace:" in result.output
    assert "<- fault injected" in result.output
    assert "verdict: 0 violations" not in result.output
    as_json = _broken(invoke, breakages.INTENT_AFTER_DISPATCH, DEMO, "--depth", "1", "--json")
    assert as_json.exit_code == 1
    failures = json.loads(as_json.stdout)["failures"]
    # The sweep of crashes finds it, and so does the sweep of arrivals (same fault points).
    [failure] = [f for f in failures if f["mode"] == "exhaustive depth 1"]
    assert any(v.startswith("no-duplicate-effect") for v in failure["shortest"]["violations"])
    assert failure["shortest"]["fired"]
    assert failure["shortest"]["trace"][-1].endswith("<- fault injected")


def test_missing_inputs_is_a_usage_error(invoke: Invoke, user_module: str) -> None:
    """Goal: a workflow with no examples and no --input is refused with the way out named.

    Method: verify a workflow function of a module written for the test that declares no
    examples; click reports a usage error (exit 2) mentioning --input and examples=.
    """
    result = invoke(f"{user_module}:transfer")
    assert result.exit_code == 2, result.output
    assert "--input" in result.output
    assert "examples=" in result.output


def test_registry_target_with_input_reports_the_operator_path(
    invoke: Invoke, user_module: str
) -> None:
    """Goal: ``MODULE:registry --workflow NAME --input JSON`` explores a user's workflow, and a
    participant that can neither be asked nor deduplicate is reported as an operator's case.

    Method: verify the test module's registry with an explicit input (exhaustive depth 1); the
    run passes, the effect's resolution is the operator's, the warnings say so, and some
    explored instances were indeed parked in MANUAL_INTERVENTION.
    """
    result = invoke(f"{user_module}:registry", "--workflow", "transfer", "--input", '{"euros": 3}')
    assert result.exit_code == 0, result.output
    assert RESOLVED_BY_OPERATOR in _line_with(result.output, "ledger.post")
    document = json.loads(
        invoke(
            f"{user_module}:registry",
            "--workflow",
            "transfer",
            "--input",
            '{"euros": 3}',
            "--depth",
            "1",
            "--json",
        ).stdout
    )
    assert any("only be resolved by an operator" in w for w in document["warnings"])
    figures = {f["mode"]: f for f in document["figures"]}["exhaustive depth 1"]
    assert figures["statuses"].get("MANUAL_INTERVENTION", 0) > 0


def test_failing_seeds_are_banked_and_run_first(invoke: Invoke, tmp_path: Path) -> None:
    """Goal: a failing seed is written to the seed bank, and the next run starts with it.

    Method: with the ``intent-after-dispatch`` breakage, run random mode only (3 seeds) with a seed
    bank file; the run fails and the bank holds exactly the seeds whose runs failed, each named
    in the output. Then run the unbroken engine with 5 seeds: its JSON lists the banked seeds
    first, then the remaining ones of 0..4, and the bank is unchanged (nothing failed).
    """
    bank = tmp_path / "bank.json"
    broken = _broken(
        invoke,
        breakages.INTENT_AFTER_DISPATCH,
        DEMO,
        "--seed-bank",
        str(bank),
        "--no-exhaustive",
        "--seeds",
        "3",
    )
    assert broken.exit_code == 1, broken.output
    banked = json.loads(bank.read_text())["seeds"]
    assert banked
    assert set(banked) <= {0, 1, 2}
    for seed in banked:
        assert f"seed-{seed}" in broken.output
    again = invoke(DEMO, "--seed-bank", str(bank), "--no-exhaustive", "--seeds", "5", "--json")
    assert again.exit_code == 0, again.output
    seeds = json.loads(again.stdout)["seeds"]
    assert seeds["banked"] == banked
    assert seeds["run"] == [*banked, *(s for s in range(5) if s not in banked)]
    assert json.loads(bank.read_text())["seeds"] == banked


def test_a_banked_seed_outside_the_range_runs_first(invoke: Invoke, tmp_path: Path) -> None:
    """Goal: the seed bank's order is visible even when its seeds are not among 0..N-1.

    Method: write a bank holding seed 7 by hand; a run with 2 seeds runs 7, then 0 and 1,
    and says so in its human output.
    """
    bank = tmp_path / "bank.json"
    bank.write_text(json.dumps({"seeds": [7]}))
    args = (DEMO, "--seed-bank", str(bank), "--no-exhaustive", "--seeds", "2", "--instances", "1")
    document = json.loads(invoke(*args, "--json").stdout)
    assert document["seeds"]["run"] == [7, 0, 1]
    assert "from the seed bank first (7)" in invoke(*args).output


# -- coverage: what the runs reached ------------------------------------------------------------

# One crash per run and no seeds: the sweeps alone must reach every path (a second or two).
SWEEP = ("--depth", "1", "--seeds", "0")
# A few seeds as well, over two instances per input.
SWEEP_AND_SEEDS = ("--depth", "1", "--seeds", "2", "--instances", "2")


def _coverage(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in document["coverage"]["items"]}


def _verified(invoke: Invoke, target: str, *args: str) -> dict[str, Any]:
    result = invoke(target, *args, "--json")
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def test_the_issues_order_with_an_approval_reaches_every_item(invoke: Invoke, shop: str) -> None:
    """Goal: on reserve -> charge -> approval wait -> sleep -> ship, the pivot and everything
    else are really explored (the bug: the explorer never delivered an approval, ``ship`` never
    ran, and the report still said 0 violations and non vacuity 1.0).

    Method: verify the shop's ``order`` (exhaustive depth 1, 2 seeds x 2 instances) with
    ``--json``: the coverage lists the workflow's effects, its approval wait, its sleep, its
    pivot and both compensations, each reached by some runs; the effects, the pivot and the
    wait were crashed at and recovered past; the compensations were reached (the approval's
    timeout and the refusals compensate); nothing is unreached, no run ended non-terminal,
    every instance ended; ``--require-coverage`` passes; the text report shows the table.
    """
    document = _verified(invoke, f"{shop}:order", *SWEEP_AND_SEEDS, "--require-coverage")
    rows = _coverage(document)
    assert {(r["kind"], name) for name, r in rows.items()} == {
        ("effect", "stock.reserve"),
        ("effect", "bank.charge"),
        ("wait", "wait:approval"),
        ("wait", "sleep"),
        ("pivot", "carrier.ship"),
        ("compensation", "bank.refund"),
        ("compensation", "stock.release"),
    }
    assert all(row["reached"] > 0 for row in rows.values()), rows
    for name in ("stock.reserve", "bank.charge", "carrier.ship", "wait:approval"):
        assert rows[name]["crashed"] > 0, rows[name]
        assert rows[name]["recovered"] > 0, rows[name]
    assert rows["wait:approval"]["completed"] < rows["wait:approval"]["reached"]  # timeouts too
    coverage = document["coverage"]
    assert coverage["unreached"] == []
    assert coverage["runs_non_terminal"] == 0
    assert coverage["non_vacuity"] == 1.0
    for figures in document["figures"]:
        assert "WAITING" not in figures["statuses"], figures
    statuses = {s for f in document["figures"] for s in f["statuses"]}
    assert {"SUCCEEDED", "COMPENSATED"} <= statuses
    assert {e["effect"] for e in document["effects"]} == {
        "stock.reserve",
        "bank.charge",
        "carrier.ship",
        "bank.refund",
        "stock.release",
    }
    text = invoke(f"{shop}:order", *SWEEP).output
    table = _section(text, "coverage (")
    for name in rows:
        assert name in table, name
    assert "never reached             none" in text


def test_a_wait_with_no_timeout_gets_its_event_and_ends(invoke: Invoke, shop: str) -> None:
    """Goal: a workflow waiting for a signal with no timeout is given its event, so its runs
    end (the bug: every run ended WAITING, with 0 violations).

    Method: verify the shop's ``hold`` (exhaustive depth 1, 2 seeds x 2 instances): no mode's
    statuses hold WAITING (the refusals mode fails the shipment on purpose), the crash sweep's
    and the seeds' instances all SUCCEEDED, the wait and the effect after it were reached, and
    the explorer sent the event at the wait in every run of the sweep.
    """
    document = _verified(invoke, f"{shop}:hold", *SWEEP_AND_SEEDS)
    for figures in document["figures"]:
        assert set(figures["statuses"]) <= {"SUCCEEDED", "CANCELLED", "FAILED"}, figures
        if figures["mode"] in ("exhaustive depth 1", "random"):
            assert figures["statuses"] == {"SUCCEEDED": figures["executions"]}, figures
    rows = _coverage(document)
    assert rows["wait:released"]["completed"] > 0
    assert rows["carrier.ship"]["reached"] > 0
    assert document["coverage"]["runs_non_terminal"] == 0
    exhaustive = {f["mode"]: f for f in document["figures"]}["exhaustive depth 1"]
    assert exhaustive["events_sent_to_waits"] >= exhaustive["runs"]


def test_an_effect_no_input_reaches_is_a_warning_and_a_gap(
    invoke: Invoke, entry: Any, shop: str
) -> None:
    """Goal: an effect the code can reach but no run reached is listed with 0 runs, warned
    about by name, and ``--require-coverage`` makes it an error.

    Method: verify the shop's ``perk``, whose upgrade happens only for VIPs while its only
    example is not one: the coverage row of ``perks.upgrade`` says 0 runs (its participant is
    used by nothing else: the workflow's code names it), the JSON lists it as unreached and
    the warnings name it, and the text report marks it "0 (never)"; with
    ``--require-coverage`` (through the real entry point) the exit code is 1 and stderr has one
    line naming it.
    """
    document = _verified(invoke, f"{shop}:perk", *SWEEP)
    upgrade = _coverage(document)["perks.upgrade"]
    assert (upgrade["kind"], upgrade["reached"], upgrade["origin"]) == ("pivot", 0, "code")
    assert document["coverage"]["unreached"] == ["pivot perks.upgrade"]
    assert any(w.startswith("never reached: pivot perks.upgrade") for w in document["warnings"])
    text = invoke(f"{shop}:perk", *SWEEP).output
    assert "0 (never)" in _line_with(text, "perks.upgrade", table="coverage (")
    assert "never reached: pivot perks.upgrade" in text
    code, out, err = entry("verify", f"{shop}:perk", *SWEEP, "--require-coverage")
    assert code == 1, (out, err)
    [line] = err.strip().splitlines()
    assert line.startswith("error: coverage required: never reached by any of ")
    assert line.endswith("runs: pivot perks.upgrade")
    assert "verdict: 0 violations" in out


def test_arrivals_drive_a_branch_that_depends_on_the_payload(
    invoke: Invoke, shop: str, tmp_path: Path
) -> None:
    """Goal: where a branch depends on what arrives, the author scripts the arrivals with
    ``--arrivals FILE`` or ``Example(events=...)``, and both branches are then explored.

    Method: ``express`` flies when the event says drone: with the explorer's default arrival
    (a null payload) the flight is never reached and the report says which event got the
    default; with an arrivals file listing a drone and a van payload, the flight, the van and
    the timeout are all reached and ``--require-coverage`` passes; ``express_scripted``
    carries the same arrivals in its example and is covered without a file.
    """
    default = _verified(invoke, f"{shop}:express", *SWEEP)
    assert _coverage(default)["carrier.fly"]["reached"] == 0
    assert default["coverage"]["defaulted_events"] == ["carrier"]
    arrivals = tmp_path / "arrivals.json"
    events = {"carrier": [{"payload": {"carrier": "drone"}}, {"payload": {"carrier": "van"}}]}
    arrivals.write_text(json.dumps({"events": events}))
    scripted = _verified(
        invoke, f"{shop}:express", *SWEEP, "--arrivals", str(arrivals), "--require-coverage"
    )
    rows = _coverage(scripted)
    assert rows["carrier.fly"]["reached"] > 0
    assert rows["carrier.ship"]["reached"] > 0
    assert rows["wait:carrier"]["completed"] < rows["wait:carrier"]["reached"]  # timeouts too
    assert scripted["coverage"]["defaulted_events"] == []
    exhaustive = {f["mode"]: f for f in scripted["figures"]}["exhaustive depth 1"]
    assert exhaustive["paths"] == 3  # drone, van, timeout
    example = _verified(invoke, f"{shop}:express_scripted", *SWEEP, "--require-coverage")
    assert _coverage(example)["carrier.fly"]["reached"] > 0


def test_arrivals_file_inputs_carry_their_own_events(
    invoke: Invoke, shop: str, tmp_path: Path
) -> None:
    """Goal: an arrivals file may list inputs, each with its own events, explored instead of
    the definition's examples; and a malformed file is one clear error.

    Method: a file whose only input scripts a drone for ``express``: the flight is reached and
    the van is not (the default is not sent where the input scripts the event). A file with a
    typo (``event`` for ``events``) is refused with LF107 naming the key, and a file that is
    not JSON with a command line error.
    """
    arrivals = tmp_path / "arrivals.json"
    drone = {"carrier": [{"payload": {"carrier": "drone"}}]}
    arrivals.write_text(json.dumps({"inputs": [{"input": {"order": 9}, "events": drone}]}))
    document = _verified(invoke, f"{shop}:express", *SWEEP, "--arrivals", str(arrivals))
    assert document["inputs"] == 1
    rows = _coverage(document)
    assert rows["carrier.fly"]["reached"] > 0
    assert rows["carrier.ship"]["reached"] == 0
    arrivals.write_text(json.dumps({"event": drone}))
    typo = invoke(f"{shop}:express", *SWEEP, "--arrivals", str(arrivals))
    assert typo.exit_code != 0
    assert "LF107" in str(typo.exception)
    assert "'event'" in str(typo.exception)
    arrivals.write_text("{not json")
    broken = invoke(f"{shop}:express", *SWEEP, "--arrivals", str(arrivals))
    assert broken.exit_code == 2, broken.output
    assert "--arrivals" in broken.output


def test_the_report_and_non_vacuity_are_the_workflows_own(invoke: Invoke, shop: str) -> None:
    """Goal: the report lists the effects of the workflow verified, not of its module, and
    ``non vacuity`` is computed over those effects (the bug: 1.0 with the pivot never run).

    Method: verify the shop's ``perk``: its effects are the charge, the ship and the upgrade
    (with the charge's refund), never ``books.audit`` of another workflow of the module nor
    the stock's; the upgrade is never reached, so the non vacuity over its 4 effects is 0.75,
    overall and for the exhaustive sweep; ``order``'s coverage figure is 1.0.
    """
    document = _verified(invoke, f"{shop}:perk", *SWEEP)
    effects = {e["effect"] for e in document["effects"]}
    assert effects == {"bank.charge", "bank.refund", "carrier.ship", "perks.upgrade"}
    assert "books.audit" not in json.dumps(document["coverage"])
    effect_rows = [r for r in document["coverage"]["items"] if r["kind"] != "wait"]
    assert len(effect_rows) == len(effects)
    touched = len(effects) - 1
    assert document["coverage"]["non_vacuity"] == round(touched / len(effects), 4)
    exhaustive = {f["mode"]: f for f in document["figures"]}["exhaustive depth 1"]
    assert exhaustive["non_vacuity"] < 1.0


# -- the report as data --------------------------------------------------------------------------


def _registry_with(participant: Participant, **effect: Any) -> Registry:
    registry = Registry()
    registry.add_participant(participant)

    @participant.effect("post", **effect)
    async def post(call: Any) -> None:
        return None

    @registry.workflow(name="flow", version=1)
    async def flow(ctx: Any, value: Any) -> None:
        await ctx.effect(post, value)

    return registry


def test_report_warns_about_missing_compensation_and_operator_only_doubt() -> None:
    """Goal: the report warns where an effect cannot be undone or its doubt needs a person.

    Method: declare a compensatable effect with no compensation at a participant with neither
    a lookup nor deduplication; the effect's resolution is the operator's, its compensation
    reads "none declared", and both warnings are present. Declaring a compensation removes the
    first warning only.
    """
    registry = _registry_with(Participant("ledger"), classification="compensatable")
    report = build_report(registry, registry.get("flow"))
    [effect] = report.effects
    assert effect.unknown_resolution == RESOLVED_BY_OPERATOR
    assert effect.compensation == NO_COMPENSATION
    assert not effect.pivot
    assert any("compensatable but declares no compensation" in w for w in report.warnings)
    assert any("only be resolved by an operator" in w for w in report.warnings)
    assert report.figures == []

    declared = _registry_with(
        Participant("ledger"), classification="compensatable", compensation="reverse"
    )
    warnings = build_report(declared, declared.get("flow")).warnings
    assert not any("declares no compensation" in w for w in warnings)
    assert any("only be resolved by an operator" in w for w in warnings)


def test_manual_intervention_doubt_goes_to_an_operator_even_when_deduplicated() -> None:
    """Goal: a manual-intervention effect is never re-sent on doubt, and the report says so.

    Method: declare a manual-intervention effect at a deduplicating participant without a
    lookup; the report names the operator, and resolve_unknown parks where the same
    participant's other effects would be re-dispatched.
    """
    registry = _registry_with(
        Participant("desk", deduplicates=True), classification="manual-intervention"
    )
    report = build_report(registry, registry.get("flow"))
    assert report.effects[0].unknown_resolution == RESOLVED_BY_OPERATOR
    decision = resolve_unknown(
        answer=None, deduplicates=True, attempts_left=3, doubt_goes_to_operator=True
    )
    assert decision.kind is ResolutionKind.PARK


@pytest.mark.parametrize(("lookup", "deduplicates"), [(a, b) for a in (0, 1) for b in (0, 1)])
def test_resolution_text_agrees_with_resolve_unknown(lookup: int, deduplicates: int) -> None:
    """Goal: the report's words for UNKNOWN resolution say what the engine's decision does.

    Method: for each combination of lookup and deduplication, compare the text with
    ``resolve_unknown``: with a lookup, "applied" confirms, "not applied" re-dispatches and
    "cannot tell" goes to an operator even at a deduplicating participant; without one, a
    deduplicating participant gets a re-dispatch and any other is parked.
    """
    participant = Participant("p", deduplicates=bool(deduplicates))
    if lookup:

        @participant.lookup
        def find(key: Any, attempt: int) -> LookupAnswer:
            return LookupAnswer.unknown()

    text = unknown_resolution(participant)
    if lookup:
        assert text == RESOLVED_BY_LOOKUP
        applied = resolve_unknown(
            answer=LookupAnswer.applied({}), deduplicates=bool(deduplicates), attempts_left=1
        )
        absent = resolve_unknown(
            answer=LookupAnswer.not_applied(), deduplicates=bool(deduplicates), attempts_left=1
        )
        assert (applied.kind, absent.kind) == (ResolutionKind.CONFIRM, ResolutionKind.REDISPATCH)
        untold = resolve_unknown(
            answer=LookupAnswer.unknown(), deduplicates=bool(deduplicates), attempts_left=1
        )
        assert untold.kind is ResolutionKind.PARK
        assert "operator if it cannot tell" in text
        return
    decision = resolve_unknown(answer=None, deduplicates=bool(deduplicates), attempts_left=1)
    if deduplicates:
        assert (text, decision.kind) == (RESOLVED_BY_DEDUPE, ResolutionKind.REDISPATCH)
    else:
        assert (text, decision.kind) == (RESOLVED_BY_OPERATOR, ResolutionKind.PARK)


def test_identity_texts_match_the_real_derivations() -> None:
    """Goal: the identities the report states are the ones the code derives.

    Method: fill the idempotency key pattern with sample values and compare it with
    ``idempotency_key``; recompute an instance id by the stated rule and compare it with
    ``instance_id_for``; the compensation namespace is ``compensation_key``'s prefix.
    """
    instance = InstanceId("wf_abc")
    effect = effect_id(instance, RunNumber(1), StepSeq(2))
    key = idempotency_key(
        tenant=DEFAULT_TENANT, effect=effect, participant="bank", operation="charge"
    )
    filled = idempotency_key_pattern().format(
        tenant=DEFAULT_TENANT,
        participant="bank",
        operation="charge",
        instance=instance,
        run=1,
        seq=2,
    )
    assert filled == key
    digest = hashlib.sha256(f"{DEFAULT_TENANT}\0order\0key-1".encode()).hexdigest()
    assert instance_id_for(DEFAULT_TENANT, "order", BusinessKey("key-1")) == f"wf_{digest[:26]}"
    registry = _registry_with(Participant("p"), classification="reversible")
    stated = build_report(registry, registry.get("flow")).identities["compensation key"]
    assert compensation_key(key) == stated.replace("<original idempotency key>", key)


def test_report_flags_a_definition_that_is_not_the_newest() -> None:
    """Goal: verifying an older version says that new instances run the newest one.

    Method: register versions 1 and 2 of one workflow; the report of version 1 carries a
    warning naming v2, and the report of version 2 does not.
    """
    registry = _registry_with(Participant("p", deduplicates=True), classification="reversible")

    @registry.workflow(name="flow", version=2)
    async def flow_v2(ctx: Any, value: Any) -> None:
        return None

    old = build_report(registry, registry.get("flow", 1))
    assert old.newest_version == 2
    assert any("newest version, v2" in w for w in old.warnings)
    assert not any("newest" in w for w in build_report(registry, registry.get("flow")).warnings)


def test_failure_trace_keeps_faults_and_the_hits_before_the_last() -> None:
    """Goal: a long trace stays short but never hides an injected fault or a gap.

    Method: a run of 100 hits with faults at hits 3 and 90, traced with at most 5 lines
    before the last fault: the trace shows a gap line for hits 1..2, hit 3, a gap line
    counting hits 4..85, hits 86..90,
    both faults marked, and nothing after the last fault; the faults, listed out of order by the
    run, are put in hit order.
    """
    hits = [f"#{n} point.p" for n in range(1, 101)]
    result = RunResult(
        label="crash-3-90",
        violations=[],
        statuses=Counter(),
        crashes=2,
        errors=0,
        misbehaviours=0,
        stale_writes_refused=0,
        stale_writes_accepted=0,
        touched=0,
        touched_terminal=0,
        hits=hits,
        fired=[hits[89], hits[2]],
    )
    assert faults_in_order(result) == [hits[2], hits[89]]
    trace = failure_trace(result, lines_max=5)
    assert trace == [
        "... 2 hit(s) not shown",
        "#3 point.p  <- fault injected",
        "... 82 hit(s) not shown",
        "#86 point.p",
        "#87 point.p",
        "#88 point.p",
        "#89 point.p",
        "#90 point.p  <- fault injected",
    ]


def test_progress_is_a_bar_on_a_terminal_and_nothing_elsewhere(
    invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: a long exploration shows its progress on a terminal (the bug: `verify --seeds
    200` ran silently for 10 s) and adds nothing to output that is not a terminal.

    Method: random mode only, 3 seeds: with stderr a pipe (CliRunner), stderr is empty; with
    the progress console a terminal, it drew a "random" bar that reached 3/3.
    """
    args = (DEMO, "--no-exhaustive", "--seeds", "3", "--instances", "2", "--json")
    piped = invoke(*args)
    assert piped.exit_code == 0, piped.output
    assert piped.stderr == ""
    screen = io.StringIO()
    monkeypatch.setattr(
        verify_module,
        "_progress_console",
        lambda: Console(file=screen, force_terminal=True, width=100),
    )
    shown = invoke(*args)
    assert shown.exit_code == 0, shown.output
    assert "random" in screen.getvalue()
    assert "3/3" in screen.getvalue()


def test_report_states_which_exceptions_are_business_failures() -> None:
    """Goal: the consistency report says which exceptions compensate (business failures) and
    what any other exception does (a defect: bounded tries, then parked, nothing undone).

    Method: a workflow declaring KeyError as a business failure lists BusinessFailure, the
    engine's step errors and "declared: builtins.KeyError", and its defects line names the
    attempts and workflow_defect; the same workflow with on_defect="compensate" says every
    exception compensates and nothing is a defect.
    """
    registry = Registry()

    async def flow(ctx: Any, value: Any) -> None:
        return None

    registry.workflow(name="flow", version=1, business_failures=(KeyError,))(flow)
    registry.workflow(name="flow", version=2, on_defect="compensate")(flow)
    declared = build_report(registry, registry.get("flow", 1))
    assert declared.business_failures[0] == "ledgerflow.BusinessFailure and its subclasses"
    assert "EffectFailedError" in declared.business_failures[1]
    assert declared.business_failures[2:] == ["declared: builtins.KeyError"]
    assert "tried 3 times in all" in declared.defects
    assert "parked workflow_defect" in declared.defects
    compensating = build_report(registry, registry.get("flow", 2))
    assert compensating.business_failures == ["every exception (on_defect='compensate')"]
    assert compensating.defects.startswith("none")
