"""Replay checks, history export, replay-proven upgrades and declared migrations (internal).

Every move of an in-flight instance to other code is proven first: its journal (mapped by the
migration plan, for a migration) is replayed against the new code with nothing dispatched
(:mod:`ledgerflow.runtime.replay`), and only a clean replay moves it. An instance is refused
outright while an effect of it is UNKNOWN, while it compensates or cancels, or while a worker
holds a live lease on it. Each move is one transaction with its audit record, which keeps the
replay's evidence and the actor; the store re-checks the pin and the lease in that
transaction. Effect ids and idempotency keys are never minted again: a moved effect keeps the
ones it was recorded with.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ledgerflow import limits
from ledgerflow.errors import (
    ConfigurationError,
    PayloadError,
    RepairRefusedError,
)
from ledgerflow.model.codec import Codec
from ledgerflow.model.definition import Registry, WorkflowDefinition
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import EffectId, Generation, IdempotencyKey, StepSeq
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.operators.actions import MIGRATE, UPGRADE
from ledgerflow.runtime.clock import Clock
from ledgerflow.runtime.core import detail_of
from ledgerflow.runtime.history import history_document, journal_of, read_histories
from ledgerflow.runtime.replay import ReplayVerdict, replay, replay_against
from ledgerflow.storage.audit import AuditEntry, PositionMove, RepairWrite, Repin
from ledgerflow.storage.records import EffectRecord, InstanceRecord, Journal
from ledgerflow.storage.store import Store

# Statuses an upgrade or a migration considers: the instance has not ended (a parked one may
# be resumed after it moved).
_IN_FLIGHT = (
    InstanceStatus.RUNNING,
    InstanceStatus.WAITING,
    InstanceStatus.MANUAL_INTERVENTION,
    InstanceStatus.COMPENSATING,
    InstanceStatus.CANCELLING,
)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MigrationPlan:
    """A declared mapping of journal positions from one version to another.

    ``positions`` maps an old position to its new one; a position not named keeps its number.
    (A mapping of an old participant contract's payload is not part of a plan yet.)
    """

    workflow: str
    from_version: int
    to_version: int
    positions: Mapping[int, int]

    @staticmethod
    def from_document(document: Any, *, source: str = "the plan") -> MigrationPlan:
        if not isinstance(document, Mapping):
            raise PayloadError(f"{source} is not a JSON object")
        try:
            positions = {int(k): int(v) for k, v in dict(document.get("positions", {})).items()}
            plan = MigrationPlan(
                workflow=str(document["workflow"]),
                from_version=int(document["from_version"]),
                to_version=int(document["to_version"]),
                positions=positions,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise PayloadError(
                f"{source} is not a migration plan: {type(exc).__name__}: {exc}"
            ) from None
        if any(k < 1 or v < 1 for k, v in positions.items()):
            raise PayloadError(f"{source}: journal positions are numbered from 1")
        if len(set(positions.values())) != len(positions):
            raise PayloadError(f"{source}: two positions map to the same new position")
        return plan


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MoveOutcome:
    """What became of one instance: ``moved`` (or would move, in a dry run), or why not."""

    instance_id: str
    status: str
    outcome: str  # "moved", "would-move", "diverged", "refused"
    verdict: ReplayVerdict | None
    refusal: str | None = None
    audit_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["verdict"] = self.verdict.to_json() if self.verdict else None
        return out


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MoveReport:
    kind: str
    workflow: str
    from_version: int
    to_version: int
    to_fingerprint: str
    dry_run: bool
    outcomes: tuple[MoveOutcome, ...]

    @property
    def left_pinned(self) -> list[MoveOutcome]:
        return [o for o in self.outcomes if o.outcome in ("diverged", "refused")]

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "outcomes"}
        out["outcomes"] = [o.to_json() for o in self.outcomes]
        return out


def _outcome(
    instance: InstanceRecord,
    outcome: str,
    verdict: ReplayVerdict | None,
    *,
    refusal: str | None = None,
    audit_id: int | None = None,
) -> MoveOutcome:
    return MoveOutcome(
        instance_id=instance.instance_id,
        status=instance.status.value,
        outcome=outcome,
        verdict=verdict,
        refusal=refusal,
        audit_id=audit_id,
    )


def moved_effect_identity(effect: EffectRecord, to_seq: int) -> tuple[EffectId, IdempotencyKey]:
    """The id and key a moved effect is written back with: its own, never minted again.
    (A seam: tests/breakages.py replaces it with one that mints new ones, to prove the
    test that catches it.)"""
    return effect.effect_id, effect.idempotency_key


def replay_folder(
    registry: Registry, directory: str | Path, *, codec: Codec
) -> list[ReplayVerdict]:
    """Replay a folder of exported histories against the registry (no store needed)."""
    details = read_histories(directory)
    return asyncio.run(
        _replay_all(registry, [(d.instance, journal_of(d)) for d in details], codec=codec)
    )


async def _replay_all(
    registry: Registry, pairs: list[tuple[InstanceRecord, Journal]], *, codec: Codec
) -> list[ReplayVerdict]:
    return [await replay_against(registry, i, journal, codec=codec) for i, journal in pairs]


class Upgrades:
    """Replay checks and moves of in-flight instances, on one store."""

    def __init__(self, store: Store, registry: Registry, *, clock: Clock, codec: Codec) -> None:
        self.store = store
        self.registry = registry
        self.clock = clock
        self.codec = codec

    # -- replay checks -------------------------------------------------------------------------

    def candidates(
        self, *, workflow: str | None, version: int | None, limit: int
    ) -> list[InstanceRecord]:
        """In-flight and recently ended instances, newest first."""
        found = self.store.list_instances(
            status=None, workflow_name=workflow, tenant=None, limit=limits.REPLAY_SCAN_MAX
        )
        chosen = [i for i in found if version is None or i.workflow_version == version]
        return chosen[:limit]

    def replay_stored(
        self, *, workflow: str | None, version: int | None, limit: int
    ) -> list[ReplayVerdict]:
        """Replay the journals of :meth:`candidates` against the registry's code as it is."""
        pairs = [
            (i, self.store.journal(i.instance_id, i.run))
            for i in self.candidates(workflow=workflow, version=version, limit=limit)
        ]
        return asyncio.run(self._replay_all(pairs))

    async def _replay_all(self, pairs: list[tuple[InstanceRecord, Journal]]) -> list[ReplayVerdict]:
        return await _replay_all(self.registry, pairs, codec=self.codec)

    def export(self, instance_id: str) -> dict[str, Any]:
        """One instance's history as the versioned JSON document ``replay`` reads."""
        return history_document(detail_of(self.store, instance_id))

    # -- moves ---------------------------------------------------------------------------------

    def upgrade(
        self, *, workflow: str, version: int, to_fingerprint: str, actor: str, dry_run: bool
    ) -> MoveReport:
        """Move W@N's in-flight instances pinned to another fingerprint to the registry's code
        for W@N, which must have ``to_fingerprint``; each only if its replay is clean."""
        return asyncio.run(
            self.upgrade_on_loop(
                workflow=workflow,
                version=version,
                to_fingerprint=to_fingerprint,
                actor=actor,
                dry_run=dry_run,
            )
        )

    async def upgrade_on_loop(
        self, *, workflow: str, version: int, to_fingerprint: str, actor: str, dry_run: bool
    ) -> MoveReport:
        """:meth:`upgrade`, for a caller already on an event loop."""
        target = self.target(workflow, version, to_fingerprint)
        instances = [
            i for i in self.in_flight(workflow, version) if i.fingerprint != to_fingerprint
        ]
        return await self.moving(
            UPGRADE, target, instances, {}, actor=actor, dry_run=dry_run, from_version=version
        )

    def migrate(self, plan: MigrationPlan, *, actor: str, dry_run: bool) -> MoveReport:
        """Move W@from's in-flight instances to W@to under the plan's mapping of positions."""
        if plan.from_version == plan.to_version:
            raise ConfigurationError("a migration moves to another version; use upgrade")
        target = self.target(plan.workflow, plan.to_version, None)
        instances = self.in_flight(plan.workflow, plan.from_version)
        return asyncio.run(
            self.moving(
                MIGRATE,
                target,
                instances,
                plan.positions,
                actor=actor,
                dry_run=dry_run,
                from_version=plan.from_version,
            )
        )

    def target(self, workflow: str, version: int, fingerprint: str | None) -> WorkflowDefinition:
        definition = self.registry.get(workflow, version)
        if fingerprint is not None and definition.fingerprint != fingerprint:
            raise ConfigurationError(
                f"the registry's code for {workflow} v{version} has fingerprint "
                f"{definition.fingerprint}, not {fingerprint}: load the code you mean to "
                "move the instances to"
            )
        return definition

    def in_flight(self, workflow: str, version: int) -> list[InstanceRecord]:
        found: list[InstanceRecord] = []
        for status in _IN_FLIGHT:
            found += self.store.list_instances(
                status=status, workflow_name=workflow, tenant=None, limit=limits.REPLAY_SCAN_MAX
            )
        return [i for i in found if i.workflow_version == version]

    async def moving(
        self,
        kind: str,
        target: WorkflowDefinition,
        instances: list[InstanceRecord],
        positions: Mapping[int, int],
        *,
        actor: str,
        dry_run: bool,
        from_version: int,
    ) -> MoveReport:
        """Move each instance (one after another, each in its own transaction): the async
        core of :meth:`upgrade` and :meth:`migrate`, for a caller already on an event loop."""
        outcomes = [
            await self._move(kind, target, i, positions, actor=actor, dry_run=dry_run)
            for i in instances
        ]
        return MoveReport(
            kind=kind,
            workflow=target.name,
            from_version=from_version,
            to_version=target.version,
            to_fingerprint=target.fingerprint,
            dry_run=dry_run,
            outcomes=tuple(outcomes),
        )

    def _refusal(self, instance: InstanceRecord, journal: Journal) -> str | None:
        if instance.status in (InstanceStatus.COMPENSATING, InstanceStatus.CANCELLING) or any(
            seq < 0 for seq in journal.steps
        ):
            return "a compensation is in progress"
        unknown = [e for e in journal.effects.values() if e.state is EffectState.UNKNOWN]
        if unknown:
            return f"effect {unknown[0].effect_id} (key {unknown[0].idempotency_key}) is UNKNOWN"
        if (
            instance.owner is not None
            and instance.lease_expires_at is not None
            and instance.lease_expires_at > self.clock.now()
        ):
            return f"worker {instance.owner} holds a live lease"
        return None

    async def _move(
        self,
        kind: str,
        target: WorkflowDefinition,
        instance: InstanceRecord,
        positions: Mapping[int, int],
        *,
        actor: str,
        dry_run: bool,
    ) -> MoveOutcome:
        journal = self.store.journal(instance.instance_id, instance.run)
        refused = self._refusal(instance, journal)
        if refused is not None:
            return _outcome(instance, "refused", None, refusal=refused)
        try:
            mapped, moves = _mapped(journal, positions)
        except PayloadError as exc:
            return _outcome(instance, "refused", None, refusal=exc.message)
        moved = dataclasses.replace(
            instance, workflow_version=target.version, fingerprint=target.fingerprint
        )
        verdict = await replay(target, moved, mapped, codec=self.codec)
        if not verdict.compatible:
            return _outcome(instance, "diverged", verdict)
        if dry_run:
            return _outcome(instance, "would-move", verdict)
        return self._apply(kind, target, instance, moves, verdict, actor=actor)

    def _apply(
        self,
        kind: str,
        target: WorkflowDefinition,
        instance: InstanceRecord,
        moves: tuple[PositionMove, ...],
        verdict: ReplayVerdict,
        *,
        actor: str,
    ) -> MoveOutcome:
        plan = {
            "from": {"version": instance.workflow_version, "fingerprint": instance.fingerprint},
            "to": {"version": target.version, "fingerprint": target.fingerprint},
            "moves": [dataclasses.asdict(m) for m in moves],
        }
        entry = AuditEntry(
            actor=actor,
            role=None,
            kind=kind,
            instance_id=instance.instance_id,
            target=f"{target.name}@{target.version}",
            fingerprint=f"{kind}:{instance.instance_id}:{target.fingerprint}",
            outcome="applied",
            reason=f"{kind} {target.name} v{instance.workflow_version} "
            f"{instance.fingerprint} -> v{target.version} {target.fingerprint}: replay clean "
            f"over {verdict.replayed} position(s)",
            evidence=json.dumps(verdict.to_json(), sort_keys=True),
            plan=json.dumps(plan, sort_keys=True),
        )
        write = RepairWrite(
            instance_id=instance.instance_id,
            expected_generation=Generation(instance.generation),
            expected_status=instance.status,
            fence=True,
            writes=(),
            cancel=None,
            audit=entry,
            repin=Repin(
                expected_version=instance.workflow_version,
                expected_fingerprint=instance.fingerprint,
                version=target.version,
                fingerprint=target.fingerprint,
                moves=moves,
            ),
        )
        try:
            now = self.clock.now()
            # As a repair: a lease is measured by the clock the claim measured it by.
            lease_now = None if self.store.database_clock else now
            audit_id = self.store.apply_repair(write, now=now, lease_now=lease_now)
        except RepairRefusedError as exc:
            return _outcome(instance, "refused", verdict, refusal=exc.message)
        return _outcome(instance, "moved", verdict, audit_id=audit_id)


def _mapped(
    journal: Journal, positions: Mapping[int, int]
) -> tuple[Journal, tuple[PositionMove, ...]]:
    """The journal as the new code's positions number it, and the moves that make it so."""
    steps, effects, moves = {}, {}, []
    for seq, step in journal.steps.items():
        to = StepSeq(positions.get(int(seq), int(seq)))
        if to in steps:
            raise PayloadError(f"the plan moves two recorded steps to position {to}")
        steps[to] = dataclasses.replace(step, seq=to)
        effect = journal.effects.get(seq)
        if effect is not None:
            effect_id, key = moved_effect_identity(effect, to)
            effects[to] = dataclasses.replace(
                effect, seq=to, effect_id=effect_id, idempotency_key=key
            )
        if to != seq:
            moves.append(
                PositionMove(
                    from_seq=int(seq),
                    to_seq=int(to),
                    effect_id=effects[to].effect_id if effect is not None else None,
                    idempotency_key=effects[to].idempotency_key if effect is not None else None,
                )
            )
    return Journal(steps=steps, effects=effects), tuple(moves)
