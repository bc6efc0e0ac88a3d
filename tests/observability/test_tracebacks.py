"""A failed step keeps a bounded traceback in the journal, and ``ledgerflow show`` prints it.

In-process engine, both backends: a local step raises from a nested call, once with a short
error and once with a traceback longer than the bound.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from click.testing import CliRunner

import ledgerflow as lf
from ledgerflow import limits
from ledgerflow.cli.main import cli

ONCE = lf.RetryPolicy(attempts_max=1, backoff_initial=timedelta(milliseconds=1))
registry = lf.Registry()


def _deep(n: int, message: str) -> None:
    if n == 0:
        raise ValueError(message)
    _deep(n - 1, message)


def validate(depth: int, message: str) -> None:
    _deep(depth, message)


# A validation error is checked's declared business failure: the instance ends FAILED.
@registry.workflow(name="checked", version=1, business_failures=(ValueError,))
async def checked(ctx: lf.WorkflowContext, request: dict[str, object]) -> None:
    await ctx.step("validate", validate, request["depth"], request["message"], retry=ONCE)


def _run(url: str, key: str, request: dict[str, object]) -> lf.InstanceDetail:
    async def run() -> lf.InstanceDetail:
        async with lf.Engine(url, registry) as engine:
            started = await engine.start("checked", key=key, input=request)
            await engine.worker(poll_seconds=0.01).run(until_idle=True)
            return await engine.detail(started.instance_id)

    return asyncio.run(run())


def test_a_failed_step_keeps_its_traceback_and_show_prints_it(journal_url: str) -> None:
    """Goal: the step's error keeps its traceback beside it (the frames that raised), and
    ``show`` prints it under the step.

    Method: a step raising ValueError three calls deep; read the step from the journal,
    then run ``ledgerflow show`` on the instance.
    """
    detail = _run(journal_url, "short", {"depth": 3, "message": "negative amount"})
    assert detail.instance.status is lf.InstanceStatus.FAILED
    [step] = detail.steps
    assert step.error_traceback is not None
    assert step.error_traceback.startswith("Traceback (most recent call last)")
    assert "in _deep" in step.error_traceback
    assert step.error_traceback.rstrip().endswith("ValueError: negative amount")
    shown = CliRunner().invoke(cli, ["show", detail.instance.instance_id, "--db", journal_url])
    assert shown.exit_code == 0, shown.output
    assert "traceback of step 1 (validate)" in shown.output
    assert "ValueError: negative amount" in shown.output


def test_a_long_traceback_is_kept_to_its_bound(journal_url: str) -> None:
    """Goal: a traceback longer than the bound keeps its end (the innermost frames and the
    error), never more than TRACEBACK_CHARS_MAX characters.

    Method: a step raising a few calls deep with a message nearly as long as the bound.
    """
    message = "x" * (limits.TRACEBACK_CHARS_MAX - 100)
    detail = _run(journal_url, "long", {"depth": 5, "message": message})
    [step] = detail.steps
    assert step.error_traceback is not None
    assert len(step.error_traceback) <= limits.TRACEBACK_CHARS_MAX
    assert step.error_traceback.startswith("...\n")
    assert step.error_traceback.rstrip().endswith("ValueError: " + message)
