"""Named fault points: places where a test or the fault explorer can crash, raise or pause.

Every call site reads ``if faults.plan is not None: faults.point(...)``: with no plan
installed (every production process) a point costs one global lookup, and nothing of what it
would report (its name, its ``where``) is built. A plan is installed in-process with
:func:`install` or, for a worker process, from the ``LEDGERFLOW_FAULTS`` environment variable
(a JSON list of rules), so a test can make a real worker kill itself at an exact point.

Points (``where`` carries ``instance`` — the business key, so a test can name it before the
instance id exists — and, for steps and effects, ``seq``, ``attempt`` and ``operation`` as
``participant.operation``):

- ``instance.after_claim``: ownership taken, nothing replayed yet
- ``step.before_execute`` / ``step.after_execute``: around a local step, before its journal write
- ``effect.before_dispatch``: the intent is durable, the request not sent
- ``effect.throttled``: flow control told an attempt to wait (THROTTLED, durably); it has not
  been sent (``reason`` is ``rate`` or ``concurrency``)
- ``effect.after_dispatch``: the participant answered, the outcome is not yet durable
- ``effect.after_outcome``: the outcome is durable
- ``effect.before_lookup``: about to ask the participant about an UNKNOWN effect
- ``effect.before_heartbeat`` / ``effect.after_heartbeat``: an attempt of an effect declared
  with ``heartbeat_timeout=`` is about to write a heartbeat (the one at dispatch, or one its
  code asked for) / wrote it and has not gone on
- ``instance.before_finish``: the workflow returned, its terminal state is not yet durable
- ``wait.before_timeout``: a wait found no event and its timeout is due, not yet recorded
- ``wait.before_suspend``: a wait or timer read the inbox and the cancel request and decided
  to park (WAITING until its timer), not yet recorded
- ``effect.before_suspend``: an asynchronous effect found no callback in the inbox and decided
  to park until its deadline, not yet recorded
- ``effect.before_deadline``: an asynchronous effect's deadline passed with no callback read;
  its UNKNOWN outcome is not yet recorded
- ``instance.before_release``: a retry back-off decided to give the instance up until its next
  attempt, not yet recorded
- ``adoption.before_adopt`` / ``adoption.after_adopt``: a worker replayed an instance pinned
  to code nobody serves clean against its own, and is about to adopt it / adopted it (repinned,
  claimed, audited) and has not started driving it
- ``compensation.*``: as ``effect.*``, for a compensation (``seq`` is the original step's)
- ``run.before_switch`` / ``run.after_switch``: the workflow called ``continue_as_new`` and
  the switch to the next run is not yet durable / is durable and the next run has not started
  (``run`` is the run closing / the run opened)
- ``send.before_commit`` / ``send.after_commit``: a workflow's send to another instance
  (``ctx.signal_instance``, ``ctx.start_workflow``) is decided, its step and delivery not yet
  committed / committed together (``seq`` is the send's position)
- ``schedule.after_claim`` / ``schedule.after_advance`` / ``schedule.before_fire`` /
  ``schedule.after_fire``: a worker's tick of a batch of due schedules, one transaction:
  their rows claimed (locked), nothing written / their slots' rows (FIRED, SKIPPED, MISSED,
  BUFFERED) written and cursors moved, no instance started / the fired slots' instances and
  any cancel request written, the commit not yet made / committed, and the worker has not
  counted it (``schedule`` names the batch's schedules, comma-separated; ``slots`` how many
  slots it decides; at ``after_claim``, ``claimed`` how many schedules it holds)
- ``start.before_commit`` / ``start.after_commit``: a caller's start (``Engine.start``, with
  any start option) or ``signal_with_start`` is decided, its transaction (insert, new run or
  refusal; the event) not yet committed / committed and not yet answered (``kind`` is
  ``start`` or ``signal_with_start``; ``instance`` the business key asked for)
- ``update.before_reply``: a declared update handler (``ctx.on_update``) returned under a wait
  (its take and its steps may be durable), its reply not yet published (``seq`` is the take's)
- ``relay.before_commit`` / ``relay.before_ack``: a broker relay read a participant's reply
  and has not yet committed it to the journal / committed it and not yet acknowledged it to
  the broker (``key`` and ``attempt`` are the reply's)
- ``lock.before_release``: the workflow left a durable lock's block, the release (and the
  hand-over to the first waiter) is not yet durable (``seq`` is the release's position)
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from ledgerflow.runtime.control import Abandon

ENVIRONMENT_VARIABLE = "LEDGERFLOW_FAULTS"
# kill: SIGKILL this process. crash: a simulated death of the whole worker (in-process).
# raise: an unexpected engine error for this one instance, which is then left to recovery.
# delay: a pause of the whole worker, as a stop-the-world garbage collection would cause.
ACTIONS = ("kill", "crash", "raise", "delay")


class SimulatedCrash(BaseException):
    """An in-process stand-in for the death of the worker.

    It derives from BaseException so that workflow or participant code catching ``Exception``
    cannot swallow it: like a real crash, it unwinds everything.
    """


class InjectedError(Abandon):
    """An unexpected failure inside the engine while driving one instance.

    It is an :class:`~ledgerflow.runtime.control.Abandon`: the instance is left to recovery,
    never recorded as the workflow's own failure.
    """


@dataclass(slots=True, kw_only=True)
class FaultRule:
    point: str
    action: str
    match: dict[str, Any] = field(default_factory=dict)
    times: int = 1
    delay_seconds: float = 0.0

    def matches(self, name: str, where: dict[str, Any]) -> bool:
        """Whether this rule fires at fault point ``name`` with these details (and has times
        left)."""
        return (
            self.times > 0
            and self.point == name
            and all(where.get(k) == v for k, v in self.match.items())
        )


@dataclass(slots=True)
class FaultPlan:
    """Rules matched against every point hit; the explorer's seeded plans override :meth:`hit`."""

    rules: list[FaultRule]
    fired: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def hit(self, name: str, where: dict[str, Any]) -> None:
        """Called at fault point ``name``: carry out the first rule that matches (kill, crash,
        raise...)."""
        for rule in self.rules:
            if rule.matches(name, where):
                rule.times -= 1
                self.fired.append((name, dict(where)))
                if rule.action == "kill":
                    # The real thing: no cleanup, no flush, no finally blocks.
                    os.kill(os.getpid(), signal.SIGKILL)
                elif rule.action == "crash":
                    raise SimulatedCrash(f"fault at {name} {where}")
                elif rule.action == "raise":
                    raise InjectedError(f"injected error at {name} {where}")
                else:
                    time.sleep(rule.delay_seconds)
                return

    @classmethod
    def from_json(cls, text: str) -> FaultPlan:
        """A plan from JSON: a list of rules with ``point``, ``action``, optional ``match`` and
        ``times``."""
        rules = []
        for item in json.loads(text):
            rule = FaultRule(
                point=item["point"],
                action=item["action"],
                match=dict(item.get("match", {})),
                times=int(item.get("times", 1)),
                delay_seconds=float(item.get("delay_seconds", 0.0)),
            )
            if rule.action not in ACTIONS:
                raise ValueError(f"unknown fault action {rule.action!r}")
            rules.append(rule)
        return cls(rules)


plan: FaultPlan | None = None


def install(new: FaultPlan | None) -> None:
    global plan
    plan = new


def install_from_environment() -> None:
    text = os.environ.get(ENVIRONMENT_VARIABLE)
    if text:
        install(FaultPlan.from_json(text))


def point(name: str, **where: Any) -> None:
    if plan is not None:
        plan.hit(name, where)
