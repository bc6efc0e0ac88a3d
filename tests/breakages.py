"""The engine broken on purpose, one guarantee at a time, for the tests that prove the fault
explorer is not vacuous.

Nothing here is a switch in the shipped engine: each breakage replaces, for the length of a
``with`` block, one function or method the engine is made of (a store write, the call a
dispatch sends, the compensation planner) with a broken version, and puts the original back.

- ``intent-after-dispatch``: the write-ahead intent becomes durable only with the outcome, so a
  request can leave with nothing durable saying it did (held back by the store).
- ``fresh-key-on-redispatch``: a re-dispatch goes out under a fresh idempotency key.
- ``stale-writes-accepted``: the store takes writes from an owner whose generation is stale.
- ``compensate-unconfirmed``: a failed instance also compensates effects never confirmed.
- ``any-code``: a worker claims any instance and runs it on the code it has for the
  instance's version, whatever fingerprint the instance is pinned to.
- ``remint-moved-keys``: a migration writes a moved effect back with an id and a key derived
  from its new position.
- ``claim-ignores-capability``: a claim hands out instances pinned to any definition, not only
  those the claiming worker serves.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from ledgerflow.ledger.records import Commit, EffectRecord, EffectWrite, InstanceRecord
from ledgerflow.model import compensation as compensation_model
from ledgerflow.model.definition import WorkflowDefinition
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import EffectId, IdempotencyKey, StepSeq, effect_id
from ledgerflow.operators import upgrades
from ledgerflow.runtime import compensations
from ledgerflow.runtime.effects import EffectDriver
from ledgerflow.runtime.executor import Executor
from ledgerflow.storage import sql_store
from ledgerflow.storage.sql_claims import ClaimStore
from ledgerflow.storage.sql_store import SqlStore

INTENT_AFTER_DISPATCH = "intent-after-dispatch"
FRESH_KEY_ON_REDISPATCH = "fresh-key-on-redispatch"
STALE_WRITES_ACCEPTED = "stale-writes-accepted"
COMPENSATE_UNCONFIRMED = "compensate-unconfirmed"
REMINT_MOVED_KEYS = "remint-moved-keys"
ANY_CODE = "any-code"
CLAIM_IGNORES_CAPABILITY = "claim-ignores-capability"


def _intends(commit: Commit) -> bool:
    return any(
        isinstance(w, EffectWrite)
        and w.record.state is EffectState.INTENDED
        and w.expected in (EffectState.NEW, EffectState.PLANNED)
        for w in commit.writes
    )


def _intent_after_dispatch() -> Iterator[tuple[object, str, Any]]:
    commit = SqlStore.commit

    def holding_intents(
        self: SqlStore, commits: Sequence[Commit], *, now: float
    ) -> list[Exception | None]:
        # Per store object, as a worker's memory: a crash loses what it held.
        held: dict[str, Commit] = self.__dict__.setdefault("_held_intents", {})
        answers: list[Exception | None] = []
        for one in commits:
            if _intends(one):
                held[one.instance_id] = one
                answers.append(None)  # "durable", and it is not
                continue
            earlier = held.pop(one.instance_id, None)
            together = [earlier, one] if earlier is not None else [one]
            answers.append(commit(self, together, now=now)[-1])
        return answers

    yield SqlStore, "commit", holding_intents


def _fresh_key_on_redispatch() -> Iterator[tuple[object, str, Any]]:
    call = EffectDriver._call

    def fresh_key(self: EffectDriver, *, attempt: int, key: IdempotencyKey, **kw: Any) -> Any:
        if attempt > 1:
            key = IdempotencyKey(f"{key}~{attempt}")
        return call(self, attempt=attempt, key=key, **kw)

    yield EffectDriver, "_call", fresh_key


def _stale_writes_accepted() -> Iterator[tuple[object, str, Any]]:
    yield sql_store, "_fenced_out", lambda commit: None


def _compensate_unconfirmed() -> Iterator[tuple[object, str, Any]]:
    plan = compensation_model.plan

    def every_effect(effects: Iterable[compensation_model.ConfirmedEffect]) -> Any:
        return plan(dataclasses.replace(e, state=EffectState.CONFIRMED) for e in effects)

    yield compensations, "plan", every_effect


def _remint_moved_keys() -> Iterator[tuple[object, str, Any]]:
    def reminted(effect: EffectRecord, to_seq: int) -> tuple[EffectId, IdempotencyKey]:
        return (
            effect_id(effect.instance_id, effect.run, StepSeq(to_seq)),
            IdempotencyKey(f"{effect.idempotency_key}@{to_seq}"),
        )

    yield upgrades, "moved_effect_identity", reminted


def _any_code() -> Iterator[tuple[object, str, Any]]:
    def whatever_it_has(self: Executor, instance: InstanceRecord) -> WorkflowDefinition:
        return self.registry.get(instance.workflow_name, instance.workflow_version)

    yield Executor, "_pinned_definition", whatever_it_has
    # The claim routes by fingerprint too: it must hand out any instance for the code to run.
    yield from _claim_ignores_capability()


def _claim_ignores_capability() -> Iterator[tuple[object, str, Any]]:
    claim = ClaimStore.claim

    def any_definition(self: ClaimStore, **kwargs: Any) -> Any:
        kwargs["serves"] = None
        return claim(self, **kwargs)

    yield ClaimStore, "claim", any_definition


BREAKAGES: dict[str, Callable[[], Iterator[tuple[object, str, Any]]]] = {
    INTENT_AFTER_DISPATCH: _intent_after_dispatch,
    FRESH_KEY_ON_REDISPATCH: _fresh_key_on_redispatch,
    STALE_WRITES_ACCEPTED: _stale_writes_accepted,
    COMPENSATE_UNCONFIRMED: _compensate_unconfirmed,
    REMINT_MOVED_KEYS: _remint_moved_keys,
    ANY_CODE: _any_code,
    CLAIM_IGNORES_CAPABILITY: _claim_ignores_capability,
}


@contextlib.contextmanager
def broken(name: str) -> Iterator[None]:
    """The engine with one guarantee broken for the block's length."""
    replacements = list(BREAKAGES[name]())
    originals = [
        (owner, attribute, getattr(owner, attribute)) for owner, attribute, _ in replacements
    ]
    for owner, attribute, replacement in replacements:
        setattr(owner, attribute, replacement)
    try:
        yield
    finally:
        for owner, attribute, original in originals:
            setattr(owner, attribute, original)
