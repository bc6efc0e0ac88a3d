"""The README's Python code runs as written, so the first example a newcomer tries never rots.

Issue 15, item 1: the quickstart had no ``asyncio.run``, its input was not JSON (``[...]``),
and with no worker running ``engine.result`` waited 30 s and failed without saying why. Every
```python block of README.md is saved to a file in an empty folder and run there by a fresh
interpreter, exactly as a reader would run it; it defines its own stand-in participant.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from doc_blocks import blocks
from doc_blocks import run as _run
from ledgerflow.operators.service import local_actor

README = Path(__file__).resolve().parents[1] / "README.md"
README_TEXT = README.read_text(encoding="utf-8")
BLOCKS = blocks(README_TEXT, "python")


def test_the_readme_has_python_to_run() -> None:
    """Goal: the test below has something to check. Method: at least the quickstart block."""
    assert BLOCKS
    assert "asyncio.run(main())" in BLOCKS[0]


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_every_python_block_runs_as_written(index: int, tmp_path: Path) -> None:
    """Goal: each block runs unchanged with the installed package.

    Method: save the block (the first as quickstart.py, as the README says), run it with this
    interpreter in an empty folder: exit 0, nothing on stderr.
    """
    name = "quickstart.py" if index == 0 else f"block_{index}.py"
    (tmp_path / name).write_text(BLOCKS[index], encoding="utf-8")
    done = _run(tmp_path, sys.executable, name)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_the_quickstart_prints_what_the_readme_says_twice(tmp_path: Path) -> None:
    """Goal: the quickstart's output is the one the README shows, a second run returns the same
    recorded result (one business key, one instance), and the worker command its comment names
    works on what it wrote.

    Method: run quickstart.py twice; each run prints exactly the line the README quotes after
    "It prints"; then `ledgerflow worker quickstart:registry --db sqlite:///orders.db
    --until-idle` exits 0.
    """
    (tmp_path / "quickstart.py").write_text(BLOCKS[0], encoding="utf-8")
    match = re.search(r"It prints `([^`]+)`", README.read_text(encoding="utf-8"))
    assert match is not None
    for _ in range(2):
        done = _run(tmp_path, sys.executable, "quickstart.py")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == match.group(1)
    cli = "from ledgerflow.cli.main import main; main()"
    worker = _run(
        tmp_path,
        sys.executable,
        "-c",
        f"import sys; sys.path.insert(0, '.'); {cli}",
        *("worker", "quickstart:registry", "--db", "sqlite:///orders.db", "--until-idle"),
    )
    assert worker.returncode == 0, worker.stderr


# -- the repair example (issue 24: it failed with LF701 out of the box, and a repeat with LF702) --

registry = lf.Registry()
bank = registry.add_participant(lf.Participant("bank"))  # no lookup, no deduplication


@bank.effect(classification="compensatable", retry=lf.RetryPolicy(attempts_max=1))
async def charge(call: lf.EffectCall) -> dict[str, Any]:
    # The reply is lost: the outcome is UNKNOWN, and only an operator can settle it.
    raise ConnectionError("the reply was lost")


def _total(items: list[int]) -> int:
    return sum(items)


@registry.workflow(name="order", version=1)
async def order(ctx: lf.WorkflowContext, items: list[int]) -> dict[str, Any]:
    total = await ctx.step("total", _total, items)  # step 1
    receipt = await ctx.effect(charge, {"amount": total})  # step 2, the README's "ID 2"
    return {"total": total, "receipt": receipt}


def _drain(url: str) -> None:
    async def run() -> None:
        async with lf.Engine(url, registry) as engine:
            await engine.worker(lease_seconds=1, poll_seconds=0.01).run(until_idle=True)

    asyncio.run(run())


def _repair_example(instance_id: str, *, dry_run: bool) -> str:
    """The README's shell lines up to its resolve-effect command, ID filled in."""
    block = re.search(r"^```sh\n(export LEDGERFLOW_AUTHORITY.*?)^```", README_TEXT, re.S | re.M)
    assert block is not None
    lines = block.group(1).split("--dry-run\n")[0] + ("--dry-run" if dry_run else "")
    return lines.replace(" ID ", f" {instance_id} ")


def test_the_repair_example_runs_with_its_authority_file(tmp_path: Path) -> None:
    """Goal: the README's repair example runs as written once its authority file is written
    (naming the reader's account), fails as the README says without it, and a repeat is the
    no-op (exit 0) the README promises, also after the instance has moved on.

    Method: park an order whose charge (step 2) lost its reply, in orders.db; run the README's
    shell lines in bash: without authority.toml, LF701 naming the missing grant; with the
    README's TOML block (its account replaced by this one's), the dry run (exit 0, the plan),
    the repair (applied); a worker finishes the order; the repair again: exit 0, no-op.
    """
    url = f"sqlite:///{tmp_path / 'orders.db'}"
    with lf.SyncEngine(url, registry) as engine:
        instance_id = engine.start("order", key="order-7", input=[1250, 499]).instance_id
    _drain(url)
    with lf.SyncEngine(url, registry) as engine:
        assert engine.get(instance_id).status is lf.InstanceStatus.MANUAL_INTERVENTION
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])

    def bash(script: str) -> subprocess.CompletedProcess[str]:
        return _run(tmp_path, "bash", "-c", f"export PATH={shlex.quote(path)}\n{script}")

    # The same lines without the authority file (the README's first line names it).
    without = bash(
        _repair_example(instance_id, dry_run=True).replace("LEDGERFLOW_AUTHORITY=", "_=")
    )
    assert without.returncode == 1
    assert f"[LF701] {local_actor()} holds no grant that allows resolve-effect" in without.stderr

    toml = re.search(r"^```toml\n(# authority\.toml.*?)^```", README_TEXT, re.S | re.M)
    assert toml is not None
    mine = toml.group(1).replace('"local:alice"', json.dumps(local_actor()))
    (tmp_path / "authority.toml").write_text(mine, encoding="utf-8")
    dry = bash(_repair_example(instance_id, dry_run=True))
    assert dry.returncode == 0, dry.stderr
    assert "effect 2: UNKNOWN -> CONFIRMED" in dry.stdout
    assert "dry run: nothing was changed" in dry.stdout
    applied = bash(_repair_example(instance_id, dry_run=False))
    assert applied.returncode == 0, applied.stderr
    assert "applied as audit #" in applied.stdout
    _drain(url)
    with lf.SyncEngine(url, registry) as engine:
        assert engine.result(instance_id, timeout=0)["receipt"] == {"receipt": "r-17"}
    again = bash(_repair_example(instance_id, dry_run=False))
    assert again.returncode == 0, again.stderr
    assert f"no-op: already applied by {local_actor()}" in again.stdout
