"""Replay checks, history export, replay-proven upgrades and declared migrations (internal).

Every move of an in-flight instance to other code is proven first: its journal (mapped by the
migration plan, for a migration) is replayed against the new code with nothing dispatched
(:mod:`ledgerflow.runtime.replay`), and only a clean replay moves it. An instance is refused
outright while it compensates or cancels, or while a worker holds a live lease on it; one with
an UNKNOWN effect moves only when the replay reaches that effect with the new code asking for
that very effect (the rule a worker's adoption applies: ``runtime/adoption.py``), so that the
new code's effect driver settles it by the protocol. Each move is one transaction with its
audit record, which keeps the replay's evidence and the actor; the store re-checks the pin and
the lease in that transaction. Effect ids and idempotency keys are never minted again: a moved
effect keeps the ones it was recorded with.
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
from ledgerflow.ledger.audit import AuditEntry, ContractRemap, PositionMove, RepairWrite, Repin
from ledgerflow.ledger.records import EffectRecord, InstanceRecord, Journal
from ledgerflow.model.codec import Codec
from ledgerflow.model.contracts import ContractMapping
from ledgerflow.model.definition import Registry, WorkflowDefinition
from ledgerflow.model.ids import EffectId, Generation, IdempotencyKey, StepSeq
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.routing import Served
from ledgerflow.operators.actions import MIGRATE, UPGRADE
from ledgerflow.runtime.adoption import in_doubt_refusal, move_refusal
from ledgerflow.runtime.clock import Clock
from ledgerflow.runtime.core import detail_of
from ledgerflow.runtime.history import history_document, journal_of, read_histories
from ledgerflow.runtime.replay import ReplayVerdict, replay, replay_against
from ledgerflow.storage.store import Store

# Statuses an upgrade or a migration considers: the instance has not ended (a parked one may
# be resumed after it moved).
_IN_FLIGHT = (
    InstanceStatus.SCHEDULED,
    InstanceStatus.RUNNING,
    InstanceStatus.WAITING,
    InstanceStatus.MANUAL_INTERVENTION,
    InstanceStatus.COMPENSATING,
    InstanceStatus.CANCELLING,
)


@dataclasses.dataclass(frozen=True, slots=True)
class UpgradeRequest:
    """Move W@N's in-flight instances to the code of ``to_fingerprint``, each only if its
    replay is clean (a dry run only replays: it writes nothing and needs no role)."""

    workflow: str
    version: int
    to_fingerprint: str
    dry_run: bool = False


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MigrationPlan:
    """A declared mapping of journal positions from one version to another.

    ``positions`` maps an old position to its new one; a position not named keeps its number.
    ``contracts`` declares how payloads recorded under an old participant contract map to the
    contract the new code declares (see :class:`~ledgerflow.model.contracts.ContractMapping`).
    """

    workflow: str
    from_version: int
    to_version: int
    positions: Mapping[int, int]
    contracts: tuple[ContractMapping, ...] = ()

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
                contracts=tuple(_contract_mapping(c) for c in document.get("contracts", [])),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PayloadError(
                f"{source} is not a migration plan: {type(exc).__name__}: {exc}"
            ) from None
        if any(k < 1 or v < 1 for k, v in positions.items()):
            raise PayloadError(f"{source}: journal positions are numbered from 1")
        if len(set(positions.values())) != len(positions):
            raise PayloadError(f"{source}: two positions map to the same new position")
        declared = [(c.participant, c.operation, c.from_version) for c in plan.contracts]
        if len(set(declared)) != len(declared):
            raise PayloadError(f"{source}: a contract of an operation is mapped twice")
        return plan


def _contract_mapping(item: Any) -> ContractMapping:
    """One ``[[contracts]]`` entry of a plan (``from``/``to`` are versions as declared)."""

    def version(value: Any) -> str | None:
        return None if value is None else str(value)

    rename = item.get("rename", {})
    if not isinstance(rename, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in rename.items()
    ):
        raise TypeError("a contract's rename maps field names to field names")
    return ContractMapping(
        participant=str(item["participant"]),
        operation=str(item["operation"]),
        from_version=version(item["from"]),
        to_version=version(item["to"]),
        rename=dict(rename),
    )


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
        self, request: UpgradeRequest, *, actor: str, role: str | None = None
    ) -> MoveReport:
        """Move W@N's in-flight instances pinned to another fingerprint to the registry's code
        for W@N, which must have ``to_fingerprint``; each only if its replay is clean."""
        return asyncio.run(self.upgrade_on_loop(request, actor=actor, role=role))

    async def upgrade_on_loop(
        self, request: UpgradeRequest, *, actor: str, role: str | None = None
    ) -> MoveReport:
        """:meth:`upgrade`, for a caller already on an event loop."""
        version, to_fingerprint = request.version, request.to_fingerprint
        target = self.target(request.workflow, version, to_fingerprint)
        pinned = self.in_flight(request.workflow, version)
        instances = [i for i in pinned if i.fingerprint != to_fingerprint]
        return await self.moving(
            UPGRADE,
            target,
            instances,
            {},
            actor=actor,
            role=role,
            dry_run=request.dry_run,
            from_version=version,
        )

    def migrate(
        self, plan: MigrationPlan, *, actor: str, dry_run: bool, role: str | None = None
    ) -> MoveReport:
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
                role=role,
                dry_run=dry_run,
                from_version=plan.from_version,
                contracts=plan.contracts,
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
        contracts: tuple[ContractMapping, ...] = (),
        role: str | None = None,
    ) -> MoveReport:
        """Move each instance (one after another, each in its own transaction): the async
        core of :meth:`upgrade` and :meth:`migrate`, for a caller already on an event loop.
        ``role`` is the one the caller's authority allowed it under (None: not checked)."""
        mover = _Mover(kind=kind, target=target, actor=actor, role=role)
        outcomes = []
        for instance in instances:
            outcome = await self._move(mover, instance, positions, contracts, dry_run=dry_run)
            if not dry_run and outcome.outcome in ("diverged", "refused"):
                self._record_left(mover, instance, outcome)
            outcomes.append(outcome)
        return MoveReport(
            kind=kind,
            workflow=target.name,
            from_version=from_version,
            to_version=target.version,
            to_fingerprint=target.fingerprint,
            dry_run=dry_run,
            outcomes=tuple(outcomes),
        )

    async def _move(
        self,
        mover: _Mover,
        instance: InstanceRecord,
        positions: Mapping[int, int],
        contracts: tuple[ContractMapping, ...],
        *,
        dry_run: bool,
    ) -> MoveOutcome:
        target = mover.target
        journal = self.store.journal(instance.instance_id, instance.run)
        refused = move_refusal(instance, journal, now=self.clock.now())
        if refused is not None:
            return _outcome(instance, "refused", None, refusal=refused)
        try:
            mapped, moves = _mapped(journal, positions)
            mapped, remaps = _contracts_mapped(mapped, contracts, codec=self.codec)
        except PayloadError as exc:
            return _outcome(instance, "refused", None, refusal=exc.message)
        moved = dataclasses.replace(
            instance, workflow_version=target.version, fingerprint=target.fingerprint
        )
        verdict = await replay(target, moved, mapped, codec=self.codec, registry=self.registry)
        if not verdict.compatible:
            return _outcome(instance, "diverged", verdict)
        # The rule a worker's adoption applies: an UNKNOWN effect moves only to code that
        # reaches it asking for that very effect, whose effect driver then settles it.
        code = Served(target.name, target.version, target.fingerprint).label
        in_doubt = in_doubt_refusal(instance, mapped, verdict, code=code)
        if in_doubt is not None:
            return _outcome(instance, "refused", verdict, refusal=in_doubt)
        if dry_run:
            return _outcome(instance, "would-move", verdict)
        return self._apply(mover, instance, (moves, remaps), verdict)

    def _apply(
        self,
        mover: _Mover,
        instance: InstanceRecord,
        changes: tuple[tuple[PositionMove, ...], tuple[_Remapped, ...]],
        verdict: ReplayVerdict,
    ) -> MoveOutcome:
        moves, remaps = changes
        target = mover.target
        plan = {
            "from": {"version": instance.workflow_version, "fingerprint": instance.fingerprint},
            "to": {"version": target.version, "fingerprint": target.fingerprint},
            "moves": [dataclasses.asdict(m) for m in moves],
            "contracts": [r.evidence for r in remaps],
        }
        entry = mover.entry(
            instance,
            outcome="applied",
            reason=f"replay clean over {verdict.replayed} position(s)",
            verdict=verdict,
            plan=plan,
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
                contracts=tuple(r.remap for r in remaps),
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

    def _record_left(self, mover: _Mover, instance: InstanceRecord, left: MoveOutcome) -> None:
        """An instance a move was asked for and left where it was is on the record too, as
        refused, with why (its replay's divergence, or the refusal)."""
        verdict = left.verdict
        why = left.refusal
        if why is None and verdict is not None:
            why = (
                f"its replay diverged at position {verdict.position} ({verdict.kind}): "
                f"{verdict.reason}"
            )
        entry = mover.entry(
            instance,
            outcome="refused",
            reason="left pinned where it was",
            verdict=verdict,
            plan={},
            refusal=why or left.outcome,
        )
        self.store.append_audit(entry, now=self.clock.now())


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Mover:
    """One upgrade or migration as its audit records name it: kind, target code, actor, role."""

    kind: str
    target: WorkflowDefinition
    actor: str
    role: str | None

    def entry(
        self,
        instance: InstanceRecord,
        *,
        outcome: str,
        reason: str,
        verdict: ReplayVerdict | None,
        plan: dict[str, Any],
        refusal: str | None = None,
    ) -> AuditEntry:
        target = self.target
        return AuditEntry(
            actor=self.actor,
            role=self.role,
            kind=self.kind,
            instance_id=instance.instance_id,
            target=f"{target.name}@{target.version}",
            fingerprint=f"{self.kind}:{instance.instance_id}:{target.fingerprint}",
            outcome=outcome,
            reason=f"{self.kind} {target.name} v{instance.workflow_version} "
            f"{instance.fingerprint} -> v{target.version} {target.fingerprint}: {reason}",
            evidence=json.dumps(verdict.to_json(), sort_keys=True) if verdict else None,
            plan=json.dumps(plan, sort_keys=True),
            refusal=refusal[:1000] if refusal else None,
        )


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


@dataclasses.dataclass(frozen=True, slots=True)
class _Remapped:
    remap: ContractRemap
    evidence: dict[str, Any]


def _contracts_mapped(
    journal: Journal, contracts: tuple[ContractMapping, ...], *, codec: Codec
) -> tuple[Journal, tuple[_Remapped, ...]]:
    """The (position-mapped) journal with the payloads the plan's contract mappings declare:
    each effect recorded under a mapped old contract gets the mapped payload as its step's
    input (what the new code sends) and the new contract version. Its recorded payload, its id
    and its key are kept: the payload is the evidence of what the participant took, and it is
    copied into the audit record beside the mapping."""
    steps, effects = dict(journal.steps), dict(journal.effects)
    remapped: list[_Remapped] = []
    for seq, effect in sorted(journal.effects.items()):
        mapping = next((c for c in contracts if seq > 0 and c.applies_to(effect)), None)
        if mapping is None:
            continue
        step = steps[seq]
        text = codec.encode(mapping.mapped(codec.decode(step.input or "null")))
        steps[seq] = dataclasses.replace(step, input=text)
        effects[seq] = dataclasses.replace(effect, contract_version=mapping.to_version)
        remapped.append(
            _Remapped(
                remap=ContractRemap(seq=int(seq), input=text, contract_version=mapping.to_version),
                evidence={
                    "seq": int(seq),
                    "effect_id": effect.effect_id,
                    "idempotency_key": effect.idempotency_key,
                    "mapping": mapping.describe(),
                    "recorded_input": step.input,
                    "recorded_payload": effect.payload,
                    "input": text,
                },
            )
        )
    return Journal(steps=steps, effects=effects), tuple(remapped)
