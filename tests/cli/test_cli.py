"""The instance commands: ``start``, ``result``, ``list`` and ``show`` against a real store.

Tests that take ``db`` run on a SQLite file and on PostgreSQL through a URL carrying a planted
password (``conftest.py``). Each test writes a tiny registry module into its temporary folder
and puts that folder on ``sys.path``, so the commands load it by ``MODULE:OBJECT`` exactly as a
user's module is loaded.
Commands run in-process through click's ``CliRunner``; where the exit code and the printed
``[LFxxx]`` line of the real entry point matter, ``main()`` itself is called. Workers run
in-process until idle, so no test sleeps.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from click.testing import CliRunner, Result

import planted
from authority_files import granting
from ledgerflow import Engine, Registry, SyncEngine, WorkflowContext
from ledgerflow.cli.main import cli
from ledgerflow.errors import (
    InstanceNotFoundError,
    NotAuthorizedError,
    ResultTimeoutError,
    SchemaVersionError,
    StoreNotFoundError,
    UnknownWorkflowError,
)
from ledgerflow.operators.service import local_actor

Entry = Callable[..., tuple[int, str, str]]
MODULE_NAME = "cli_test_workflows"
TARGET = f"{MODULE_NAME}:registry"
MODULE_SOURCE = '''
"""Workflows for the CLI tests: one in-process participant that records every key it applies."""

from __future__ import annotations

from typing import Any

import ledgerflow as lf

registry = lf.Registry()
bank = registry.add_participant(lf.Participant("bank", deduplicates=True))
applied: list[str] = []


def to_cents(euros: int) -> int:
    return euros * 100


@bank.effect(classification="compensatable")
async def post(call: lf.EffectCall) -> dict[str, Any]:
    applied.append(call.idempotency_key)
    return {"posted": call.payload["amount_cents"], "key": call.idempotency_key}


# A refusal before any effect is the transfer's declared business failure: it ends FAILED.
@registry.workflow(name="transfer", version=1, business_failures=(ValueError,))
async def transfer_v1(ctx: lf.WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    if request.get("fail"):
        raise ValueError("refused before any effect")
    cents = await ctx.step("to_cents", to_cents, request["euros"])
    receipt = await ctx.effect(post, {"amount_cents": cents})
    return {"amount_cents": cents, "receipt": receipt}


@registry.workflow(name="transfer", version=2)
async def transfer_v2(ctx: lf.WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    cents = await ctx.step("to_cents", to_cents, request["euros"])
    return {"amount_cents": cents, "version": 2}
'''


@pytest.fixture
def workflows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The test registry module, importable by name for this test only."""
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / f"{MODULE_NAME}.py").write_text(MODULE_SOURCE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    # Fixed widths and no stray settings from the environment running the tests.
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LEDGERFLOW_DB", raising=False)
    sys.modules.pop(MODULE_NAME, None)
    try:
        yield importlib.import_module(MODULE_NAME)
    finally:
        sys.modules.pop(MODULE_NAME, None)


def invoke(*args: str) -> Result:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=True)
    planted.record(result.output, repr(result.exception))
    return result


def start_args(db: str, key: str, *extra: str) -> list[str]:
    return ["start", TARGET, "transfer", "--key", key, "--db", db, *extra]


def start_json(db: str, key: str, *extra: str) -> dict[str, Any]:
    result = invoke(*start_args(db, key, "--json", *extra))
    assert result.exit_code == 0, result.output
    started: dict[str, Any] = json.loads(result.output)
    return started


def drain(db: str, registry: Registry) -> None:
    """Run an in-process worker until nothing is runnable."""

    async def run() -> None:
        async with Engine(db, registry) as engine:
            await engine.worker(lease_seconds=1, poll_seconds=0.01).run(until_idle=True)

    asyncio.run(run())


class BackgroundWorker:
    """A worker on its own thread and event loop, for commands that wait on other processes."""

    def __init__(self, db: str, registry: Registry) -> None:
        self._ready = threading.Event()
        self._stop: Any = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._run(db, registry),))

    async def _run(self, db: str, registry: Registry) -> None:
        async with Engine(db, registry) as engine:
            worker = engine.worker(lease_seconds=1, poll_seconds=0.01)
            loop = asyncio.get_running_loop()
            self._stop = lambda: loop.call_soon_threadsafe(worker.stop)
            self._ready.set()
            await worker.run()

    def __enter__(self) -> BackgroundWorker:
        self._thread.start()
        assert self._ready.wait(10), "the background worker did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()
        self._thread.join(timeout=10)
        assert not self._thread.is_alive(), "the background worker did not stop"


def test_duplicate_start_returns_the_same_instance(workflows: ModuleType, db: str) -> None:
    """Goal: a business key names one instance. Method: start one key twice with the same
    input, as JSON and as text; the id is the same and the second start says it existed."""
    first = start_json(db, "t-1", "--input", '{"euros": 3}')
    second = start_json(db, "t-1", "--input", '{"euros": 3}')
    assert first["created"] is True
    assert second["created"] is False
    assert second["instance_id"] == first["instance_id"]

    text = invoke(*start_args(db, "t-1", "--input", '{"euros": 3}'))
    assert text.exit_code == 0, text.output
    assert first["instance_id"] in text.output
    assert "already existed" in text.output

    listed = json.loads(invoke("list", "--db", db, "--json").output)["items"]
    assert [row["instance_id"] for row in listed] == [first["instance_id"]]


def test_same_key_with_other_input_is_refused(workflows: ModuleType, db: str, entry: Entry) -> None:
    """Goal: a repeated start asking for something else is not silently the same start.
    Method: start a key, start it again with another input through the real entry point:
    KeyInUseError (LF311, a ConcurrencyError)."""
    start_json(db, "t-2", "--input", '{"euros": 3}')
    code, _, err = entry(*start_args(db, "t-2", "--input", '{"euros": 4}'))
    assert code == 1
    assert "error: [LF311]" in err
    assert "another input" in err


def test_bad_input_json_is_a_clear_usage_error(workflows: ModuleType, db: str) -> None:
    """Goal: input the command cannot parse is reported as such, before anything is stored.
    Method: pass broken JSON to --input; expect exit 2 naming --input; the journal was not
    even created (list finds no journal: LF205 for a file, LF204 for a PostgreSQL schema)."""
    result = invoke(*start_args(db, "t-3", "--input", "{euros: 3"))
    assert result.exit_code == 2
    assert "--input" in result.output
    assert "not valid JSON" in result.output
    missing = invoke("list", "--db", db, "--json").exception
    assert isinstance(missing, StoreNotFoundError | SchemaVersionError)


def test_unknown_workflow_is_lf102_exit_1(workflows: ModuleType, db: str, entry: Entry) -> None:
    """Goal: an unknown workflow surfaces as the engine's LF102 with exit code 1.
    Method: the real entry point prints ``error: [LF102]``; CliRunner sees the same error."""
    code, out, err = entry("start", TARGET, "nope", "--key", "t-4", "--db", db)
    assert code == 1
    assert out == ""
    assert err.startswith("error: [LF102]")
    assert "transfer" in err  # the message names what is registered

    result = invoke("start", TARGET, "nope", "--key", "t-4", "--db", db)
    assert result.exit_code == 1
    assert isinstance(result.exception, UnknownWorkflowError)


def test_unknown_version_is_lf103_exit_1(workflows: ModuleType, db: str, entry: Entry) -> None:
    """Goal: an unregistered version surfaces as LF103, and a registered one is pinned.
    Method: start with --version 3 (exit 1, LF103), then with --version 1 and with none."""
    code, _, err = entry(*start_args(db, "t-5", "--version", "3", "--input", '{"euros": 1}'))
    assert code == 1
    assert err.startswith("error: [LF103]")
    assert "[1, 2]" in err

    pinned = start_json(db, "t-5", "--version", "1", "--input", '{"euros": 1}')
    newest = start_json(db, "t-6", "--input", '{"euros": 1}')
    assert pinned["version"] == 1
    assert newest["version"] == 2


def test_unserialisable_input_is_the_engine_payload_error(
    workflows: ModuleType, db: str, entry: Entry
) -> None:
    """Goal: JSON the codec refuses (NaN) is the engine's LF110, not a crash.
    Method: pass NaN, which Python's JSON reader accepts but the ledger codec does not."""
    code, _, err = entry(*start_args(db, "t-7", "--input", "NaN"))
    assert code == 1
    assert err.startswith("error: [LF110]")


def test_result_reads_the_store_without_the_registry(workflows: ModuleType, db: str) -> None:
    """Goal: ``result`` needs only the store, says "not done" as LF401 and prints the value.
    Method: ask before a worker ran (exit 1, LF401), run a worker, ask again as text and JSON;
    an unknown id is LF400."""
    started = start_json(db, "t-8", "--version", "1", "--input", '{"euros": 2}')
    instance_id = started["instance_id"]

    early = invoke("result", instance_id, "--db", db)
    assert early.exit_code == 1
    assert isinstance(early.exception, ResultTimeoutError)

    drain(db, workflows.registry)
    # The registry module is gone from memory: result must not need it.
    sys.modules.pop(MODULE_NAME, None)

    text = invoke("result", instance_id, "--db", db)
    assert text.exit_code == 0, text.output
    assert json.loads(text.output)["amount_cents"] == 200
    as_json = json.loads(invoke("result", instance_id, "--db", db, "--json").output)
    assert as_json["status"] == "SUCCEEDED"
    assert as_json["result"]["receipt"]["posted"] == 200

    missing = invoke("result", "wf_missing", "--db", db)
    assert missing.exit_code == 1
    assert isinstance(missing.exception, InstanceNotFoundError)


def test_list_filters_and_limits(workflows: ModuleType, db: str) -> None:
    """Goal: ``list`` shows instances with the asked filters. Method: start three (two
    versions), run one to the end, then list by status, by workflow, with a limit, as text."""
    a = start_json(db, "t-9", "--version", "1", "--input", '{"euros": 1}')
    drain(db, workflows.registry)
    b = start_json(db, "t-10", "--version", "1", "--input", '{"euros": 2}')
    start_json(db, "t-11", "--input", '{"euros": 3}')

    def listed(*extra: str) -> list[dict[str, Any]]:
        result = invoke("list", "--db", db, "--json", *extra)
        assert result.exit_code == 0, result.output
        rows: list[dict[str, Any]] = json.loads(result.output)["items"]
        return rows

    assert len(listed()) == 3
    done = listed("--status", "succeeded")
    assert [row["instance_id"] for row in done] == [a["instance_id"]]
    assert done[0]["result"]["amount_cents"] == 100  # JSON text fields come back as values
    assert {row["business_key"] for row in listed("--status", "RUNNING")} == {"t-10", "t-11"}
    assert listed("--workflow", "other") == []
    assert listed("--tenant", "default", "--limit", "1")[0]["instance_id"] != a["instance_id"]

    text = invoke("list", "--db", db)
    assert text.exit_code == 0, text.output
    for expected in (a["instance_id"], b["instance_id"], "transfer@1", "transfer@2", "SUCCEEDED"):
        assert expected in text.output
    assert "no instances" in invoke("list", "--db", db, "--status", "FAILED").output
    assert invoke("list", "--db", db, "--status", "BOGUS").exit_code == 2


def test_show_prints_the_ledgers_after_a_worker_ran(workflows: ModuleType, db: str) -> None:
    """Goal: ``show`` gives the header, the step ledger, the effect ledger and the timeline.
    Method: start, run a worker in-process until idle, then compare ``show`` (text and JSON)
    with the key the participant actually received."""
    started = start_json(db, "t-12", "--version", "1", "--input", '{"euros": 5}')
    instance_id = started["instance_id"]
    drain(db, workflows.registry)
    (key,) = workflows.applied

    result = invoke("show", instance_id, "--db", db)
    assert result.exit_code == 0, result.output
    text = result.output
    for expected in (
        instance_id,
        "t-12",
        "transfer@1 (pinned)",
        "SUCCEEDED",
        # step ledger
        "to_cents",
        "bank.post",
        "COMPLETED",
        # effect ledger
        "compensatable",
        key,
        "CONFIRMED",
        # timeline
        "- -> RUNNING",
        "INTENDED -> CONFIRMED",
        "RUNNING -> SUCCEEDED",
    ):
        assert expected in text, expected

    detail = json.loads(invoke("show", instance_id, "--db", db, "--json").output)
    assert detail["instance"]["status"] == "SUCCEEDED"
    assert len(detail["instance"]["fingerprint"]) == 32
    assert [s["name"] for s in detail["steps"]] == ["to_cents", "bank.post"]
    (effect,) = detail["effects"]
    assert effect["idempotency_key"] == key
    assert effect["state"] == "CONFIRMED"
    assert effect["evidence"] == {"posted": 500, "key": key}
    assert detail["events"][-1]["to_state"] == "SUCCEEDED"

    missing = invoke("show", "wf_missing", "--db", db)
    assert missing.exit_code == 1
    assert isinstance(missing.exception, InstanceNotFoundError)


def test_start_wait_prints_the_result_or_how_it_ended(
    workflows: ModuleType, db: str, entry: Entry
) -> None:
    """Goal: ``start --wait`` waits for another worker and prints the result, and an instance
    that ends without one is an error (LF402); with --json the failure is one JSON document
    saying how it ended, and exit 1. Method: a worker on a background thread; one start that
    succeeds, one whose workflow raises before any effect (FAILED), as text and as JSON."""
    with BackgroundWorker(db, workflows.registry):
        ok = start_json(db, "t-13", "--version", "1", "--input", '{"euros": 7}', "--wait", "20")
        failing = '{"euros": 1, "fail": true}'
        code, out, err = entry(
            *start_args(db, "t-14", "--version", "1", "--input", failing, "--wait", "20")
        )
        as_json = entry(
            *start_args(db, "t-15", "--version", "1", "--input", failing, "--wait", "20"),
            "--json",
        )
    assert as_json[0] == 1
    assert json.loads(as_json[1])["status"] == "FAILED"
    assert ok["status"] == "SUCCEEDED"
    assert ok["result"]["amount_cents"] == 700
    assert code == 1
    assert "already existed" not in out
    assert "created" in out
    assert err.startswith("error: [LF402]")
    assert "FAILED" in err


def test_cancel_from_the_command_line_is_recorded_once(tmp_path: Path) -> None:
    """Goal: `ledgerflow cancel` records a durable request; repeating it keeps the first. Like
    a repair, it needs a role that allows ``cancel``, held by who runs it (local:ACCOUNT, never
    a name typed), and every try is on the audit log.

    Method: start an instance in a store; a cancel with --actor is a usage error that says who
    acts instead; under a file that grants only alice, local:ACCOUNT is refused (LF701, the
    message says how the file names it); then cancel it twice under a file that grants
    local:ACCOUNT ``cancel`` and compare the recorded request; the audit log holds the
    refusal, the request and the repeat (no-op), each by local:ACCOUNT; an unknown id is LF400.
    """
    db = f"sqlite:///{tmp_path}/cancel.db"
    registry = Registry()

    @registry.workflow(name="noop", version=1)
    async def noop(ctx: WorkflowContext, value: int) -> int:
        return value

    with SyncEngine(db, registry) as engine:
        started = engine.start("noop", key="k", input=1)
    me = local_actor()
    alice_only = tmp_path / "alice.toml"
    alice_only.write_text('[roles]\nstopper = ["cancel"]\n[actors]\nalice = ["stopper"]\n')
    policy = granting(tmp_path, "cancel")
    runner = CliRunner()
    base = ["cancel", started.instance_id, "--db", db]
    named = runner.invoke(cli, [*base, "--reason", "as alice", "--actor", "alice"])
    assert named.exit_code == 2
    assert "--actor is not taken any more" in named.output
    refused = runner.invoke(cli, [*base, "--reason", "no role", "--authority", str(alice_only)])
    assert isinstance(refused.exception, NotAuthorizedError)
    assert f"as {me!r}" in str(refused.exception)
    base += ["--authority", policy]
    first = runner.invoke(cli, [*base, "--reason", "first", "--json"])
    second = runner.invoke(cli, [*base, "--reason", "second", "--json"])
    assert first.exit_code == 0, first.output
    assert json.loads(first.output) == json.loads(second.output)
    assert json.loads(second.output)["cancel_reason"] == "first"
    audit = runner.invoke(cli, ["audit", "--kind", "cancel", "--db", db, "--json"])
    records = json.loads(audit.output)["items"]
    assert [(r["actor"], r["outcome"]) for r in records] == [
        (me, "refused"),
        (me, "applied"),
        (me, "no-op"),
    ]
    assert {r["instance_id"] for r in records} == {started.instance_id}
    missing = runner.invoke(
        cli, ["cancel", "wf_nope", "--reason", "x", "--db", db, "--authority", policy]
    )
    assert missing.exit_code != 0
    assert isinstance(missing.exception, InstanceNotFoundError)
