"""``ledgerflow repair ...``, ``ledgerflow audit`` and the audit part of ``ledgerflow show``,
through the real entry point (its exit codes and error lines included), on a SQLite file and on
PostgreSQL (through a URL with a planted password, see ``conftest.py``)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operators"))

import repair_workflows as wf

from ledgerflow import Engine, SyncEngine
from ledgerflow.operators.service import local_actor

Entry = Callable[..., tuple[int, str, str]]
# Who runs these commands: the account the tests run under, as the command line names it.
ME = local_actor()
POLICY = f"""
[roles]
operator = ["resolve-effect", "resume", "retry-step"]
[actors]
"{ME}" = ["operator"]
"""


@pytest.fixture
def parked(db: str) -> Iterator[tuple[str, str]]:
    """A database with one instance parked on an UNKNOWN charge, and its id."""
    wf.reset()
    wf.FAULTS.add("lose-charge")
    with SyncEngine(db, wf.registry) as engine:
        instance_id = engine.start("pay", key="cli-1", input={"amount": 7}).instance_id

    async def drain() -> None:
        async with Engine(db, wf.registry) as engine:
            await engine.worker(lease_seconds=1, poll_seconds=0.01).run(until_idle=True)

    asyncio.run(drain())
    wf.reset()
    yield db, instance_id
    wf.reset()


@pytest.fixture
def policy(tmp_path: Path) -> str:
    path = tmp_path / "authority.toml"
    path.write_text(POLICY)
    return str(path)


def _resolve(db: str, instance_id: str, *extra: str) -> list[str]:
    return [
        *("repair", "resolve-effect", instance_id, "1", "--applied"),
        *("--evidence", '{"row": 17}', "--reason", "bank says applied", "--db", db, *extra),
    ]


def test_identity_and_authority_are_required(
    entry: Entry, parked: tuple[str, str], policy: str
) -> None:
    """Goal: who repairs is who runs the command: a name typed with --actor is a usage error
    (2) saying so; without a role the engine refuses (1, LF701), naming local:ACCOUNT.

    Method: run resolve-effect with --actor alice, then without it under the built-in policy.
    """
    db, instance_id = parked
    code, _, err = entry(*_resolve(db, instance_id, "--actor", "alice"))
    assert code == 2
    assert "--actor is not taken any more" in err
    assert "local:ACCOUNT" in err
    code, _, err = entry(*_resolve(db, instance_id))
    assert code == 1
    assert "[LF701]" in err
    assert ME in err
    assert "LEDGERFLOW_AUTHORITY" in err


def test_dry_run_apply_repeat_audit_and_show(
    entry: Entry, parked: tuple[str, str], policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: --dry-run prints the plan and changes nothing; apply changes once; the repeat is a
    no-op; ``audit --json`` is a listing (``{"items": [...]}``); ``show`` lists the audit
    records.

    Method: the same resolve-effect four ways, as local:ACCOUNT, the policy from
    LEDGERFLOW_AUTHORITY; read the audit log and the instance after each.
    """
    db, instance_id = parked
    monkeypatch.setenv("LEDGERFLOW_AUTHORITY", policy)
    code, out, err = entry(*_resolve(db, instance_id, "--dry-run"))
    assert code == 0, err
    assert "effect 1: UNKNOWN -> CONFIRMED" in out
    assert "dry run: nothing was changed" in out
    assert json.loads(entry("audit", "--db", db, "--json")[1]) == {"items": []}
    code, out, err = entry(*_resolve(db, instance_id, "--json"))
    assert code == 0, err
    applied = json.loads(out)
    assert applied["outcome"] == "applied"
    assert applied["changes"]["effects"][0]["state"] == "CONFIRMED"
    code, out, _ = entry(*_resolve(db, instance_id, "--json"))
    assert json.loads(out)["outcome"] == "no-op"
    code, out, _ = entry("audit", "--db", db, "--json", "--instance", instance_id)
    lines = json.loads(out)["items"]
    assert [(r["actor"], r["outcome"], r["kind"]) for r in lines] == [
        (ME, "applied", "resolve-effect"),
        (ME, "no-op", "resolve-effect"),
    ]
    assert lines[0]["plan"]["effects"][0]["evidence"] == '{"row":17}'
    code, out, _ = entry("show", instance_id, "--db", db)
    assert code == 0
    # Named for what it lists (issue 24: "repairs of this instance" over starts and signals).
    assert "audit log of this instance (every change asked for from outside)" in out
    assert "allowed by" in out
    assert "no-op" in out
    detail = json.loads(entry("show", instance_id, "--db", db, "--json")[1])
    assert [a["outcome"] for a in detail["audit"]] == ["applied", "no-op"]
    assert any(f"repair #1 by {ME}" in (e["detail"] or "") for e in detail["events"])


def test_a_forbidden_repair_exits_1_with_the_reason(
    entry: Entry, parked: tuple[str, str], policy: str
) -> None:
    """Goal: the engine's refusal reaches the operator as LF702 with its reason, audited.

    Method: retry-step on the step whose effect is UNKNOWN.
    """
    db, instance_id = parked
    code, _, err = entry(
        *("repair", "retry-step", instance_id, "1", "--reason", "try again"),
        *("--authority", policy, "--db", db),
    )
    assert code == 1
    assert "[LF702]" in err
    assert "resolve it with evidence first" in err
    code, out, _ = entry("audit", "--db", db, "--actor", ME)
    assert code == 0
    assert "refused" in out


def test_a_repair_of_an_unknown_instance_is_not_found(
    entry: Entry, parked: tuple[str, str], policy: str
) -> None:
    """Goal: repairing an instance that does not exist is LF400, like every other command on
    an unknown id (the bug: LF702, as if the repair were refused by the state machine).

    Method: resume and dry-run resume an unknown id with a role that allows it: exit 1, one
    line LF400 naming the id; nothing is added to the audit log.
    """
    db, _ = parked
    for extra in ((), ("--dry-run",)):
        code, _, err = entry(
            *("repair", "resume", "wf_nope", "--reason", "r"),
            *("--authority", policy, "--db", db, *extra),
        )
        assert code == 1
        assert err.startswith("error: [LF400]")
        assert "wf_nope" in err
        assert len(err.splitlines()) == 1
    assert json.loads(entry("audit", "--db", db, "--json")[1]) == {"items": []}


def test_a_parked_instance_is_not_said_to_have_ended(entry: Entry, parked: tuple[str, str]) -> None:
    """Goal: the result of a parked instance says it waits for an operator (the bug:
    "instance ended MANUAL_INTERVENTION", while a repair can still resume it).

    Method: `result` of the parked instance, as text and as JSON: LF402 saying it is parked,
    waiting for an operator, and not that it ended.
    """
    db, instance_id = parked
    code, _, err = entry("result", instance_id, "--db", db)
    assert code == 1
    assert "parked in MANUAL_INTERVENTION, waiting for an operator" in err
    assert "ended" not in err
    code, out, _ = entry("result", instance_id, "--db", db, "--json")
    assert code == 1
    assert json.loads(out)["code"] == "LF402"


@pytest.mark.parametrize("command", ["run-compensation", "skip-compensation"])
def test_a_compensation_position_is_taken_as_it_is(
    entry: Entry, parked: tuple[str, str], command: str
) -> None:
    """Goal: a compensation's position is negative (-1 undoes step 1) and is taken where it
    stands, not read as an unknown option (the bug: `No such option: -1`, unless after `--`).

    Method: the repair of position -1 of the parked instance, the position before the options
    and after `--`: both reach the repair (which the state refuses, naming the position:
    nothing is planned there), neither is a usage error.
    """
    db, instance_id = parked
    evidence = ("--evidence", "{}") if command == "skip-compensation" else ()
    options = (*evidence, "--dry-run", "--reason", "r", "--db", db)
    for args in ((instance_id, "-1", *options), (*options, "--", instance_id, "-1")):
        code, _, err = entry("repair", command, *args)
        assert code == 1, err
        assert "No such option" not in err
        assert err.startswith("error: [LF7"), err
