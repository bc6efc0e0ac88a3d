"""Adoption: a worker takes over in-flight work whose code nobody serves any more, once a
replay proves its journal compatible with the worker's own code (internal).

A deploy that changes a workflow's code (same version, another fingerprint) leaves instances
pinned to the old fingerprint. While a worker with the old code is live they stay with it (a
rolling deploy drains). Once none is, a worker whose code of the same workflow and version
adopts (``on_new_code="adopt_if_replay_clean"``, the default) finds them among the due work,
replays each one's journal against its own code with nothing dispatched
(:mod:`ledgerflow.runtime.replay`), and:

- clean: adopts it in the claim's transaction (repinned, claimed, audited with the worker as
  actor and the verdict as evidence: ``storage/sql_adoption.py``), then drives it;
- divergent: adopts nothing; the instance is flagged ``replay_divergence`` with the divergence
  (kind, position, what the journal holds, what the code asks for), is never touched, and the
  worker says so once;
- refused as an operator's move is (:func:`move_refusal`): an UNKNOWN effect, a compensation
  under way, a live lease.

Verdicts are kept per (instance, run, journal length, fingerprint), so a journal is replayed
against one code once, however often the worker looks.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import OrderedDict
from collections.abc import Collection

from ledgerflow import limits
from ledgerflow.ledger.audit import Adoption, AuditEntry
from ledgerflow.ledger.records import InstanceRecord, Journal
from ledgerflow.model.definition import Registry, WorkflowDefinition
from ledgerflow.model.detection import REPLAY_DIVERGENCE, DetectionBounds
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import InstanceId, WorkerId
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.routing import Served
from ledgerflow.runtime import faults, journal_log
from ledgerflow.runtime.replay import ReplayVerdict, replay
from ledgerflow.runtime.seams import Runtime
from ledgerflow.storage.store import DetectionStore

log = logging.getLogger("ledgerflow.worker")

# The audit log's kind of an adoption.
ADOPT = "adopt"
# Instances one adoption pass looks at, beyond the slots it may fill (some are refused).
CANDIDATES_MAX = 100


def move_refusal(instance: InstanceRecord, journal: Journal, *, now: float) -> str | None:
    """Why an instance may not be moved to other code now (an operator's upgrade or a worker's
    adoption), or None: a compensation under way finishes on the code that began it, an
    UNKNOWN effect is settled first, and a live lease belongs to a worker driving it."""
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
        and instance.lease_expires_at > now
    ):
        return f"worker {instance.owner} holds a live lease"
    return None


def divergence_evidence(
    instance: InstanceRecord, definition: WorkflowDefinition, verdict: ReplayVerdict
) -> str:
    """What a person reads on a ``replay_divergence`` flag: where the code and the journal part."""
    pinned = Served(instance.workflow_name, instance.workflow_version, instance.fingerprint)
    code = Served(definition.name, definition.version, definition.fingerprint)
    return (
        f"pinned to {pinned.label}, which no live worker serves; the journal does not replay "
        f"against {code.label} ({verdict.kind} at position {verdict.position}: the journal "
        f"holds {verdict.holds or 'nothing'}, the code asks for {verdict.asks or 'nothing'}). "
        "Not adopted, not touched: run a worker with its code, or move it with a declared "
        "migration (docs/versioning.md)"
    )[:4000]


_Key = tuple[str, int, int, str]


class Adopter:
    """One worker's adoptions (see the module's docstring).

    Example (what :meth:`~ledgerflow.runtime.engine.Engine.worker` builds)::

        adopter = Adopter(runtime=runtime, registry=registry, flags=store, owner=worker_id,
                          bounds=DEFAULT_BOUNDS)
        records = await adopter.adopt(limit=8, running=[], lease_seconds=30, lease_now=None)
    """

    def __init__(
        self,
        *,
        runtime: Runtime,
        registry: Registry,
        flags: DetectionStore,
        owner: WorkerId,
        bounds: DetectionBounds,
    ) -> None:
        self.registry = registry
        self.store = runtime.store
        self.flags = flags
        self.codec = runtime.codec
        self.clock = runtime.clock
        self.owner = owner
        self.bounds = bounds
        self.metrics = runtime.metrics
        self.adopts = registry.adopts()
        # Verdicts by (instance, run, journal length, fingerprint), oldest first, bounded.
        self._verdicts: OrderedDict[_Key, ReplayVerdict] = OrderedDict()
        # Instances whose journal diverges from this code (flagged once), oldest first.
        self._divergent: OrderedDict[InstanceId, None] = OrderedDict()
        self._last_empty_at: float | None = None

    def due(self) -> bool:
        """Whether a pass is worth its read now: this code adopts something, and the last
        pass found candidates or was long enough ago."""
        if not self.adopts:
            return False
        last = self._last_empty_at
        return last is None or self.clock.now() - last >= limits.ADOPTION_SCAN_SECONDS

    async def adopt(
        self,
        *,
        limit: int,
        running: Collection[InstanceId],
        lease_seconds: float,
        lease_now: float | None,
    ) -> list[InstanceRecord]:
        """Adopt up to ``limit`` instances (claimed for this worker, to be driven now)."""
        candidates = await self.store.adoptable(
            adopts=self.adopts,
            live_since=self.clock.now() - self.bounds.worker_silent_seconds,
            now=lease_now,
            limit=min(limit + CANDIDATES_MAX, limits.CLAIM_BATCH_MAX),
            # A journal found divergent is not looked at again: it would crowd the candidates.
            running=[*running, *self._divergent],
        )
        self._last_empty_at = None if candidates else self.clock.now()
        adopted: list[InstanceRecord] = []
        for instance in candidates:
            if len(adopted) >= limit:
                break
            record = await self._one(instance, lease_seconds=lease_seconds, lease_now=lease_now)
            if record is not None:
                adopted.append(record)
        return adopted

    async def _one(
        self, instance: InstanceRecord, *, lease_seconds: float, lease_now: float | None
    ) -> InstanceRecord | None:
        definition = self.registry.get(instance.workflow_name, instance.workflow_version)
        journal = await self.store.journal(instance.instance_id, instance.run)
        if move_refusal(instance, journal, now=self.clock.now()) is not None:
            return None  # no_capable_worker keeps it visible; an operator settles what refuses
        verdict = await self._verdict(definition, instance, journal)
        if not verdict.compatible:
            await self._diverged(instance, definition, verdict)
            self._divergent[instance.instance_id] = None
            while len(self._divergent) > limits.ADOPTION_VERDICTS_KEPT_MAX:
                self._divergent.popitem(last=False)
            return None
        adoption = Adoption(
            instance_id=instance.instance_id,
            workflow_name=instance.workflow_name,
            workflow_version=instance.workflow_version,
            expected_generation=instance.generation,
            expected_fingerprint=instance.fingerprint,
            fingerprint=definition.fingerprint,
            live_since=self.clock.now() - self.bounds.worker_silent_seconds,
            audit=self._audit_entry(instance, definition, verdict),
        )
        # The replay is clean, the adoption not yet committed; then committed, not yet driven.
        if faults.plan is not None:
            faults.point("adoption.before_adopt", instance=instance.business_key)
        got = await self.store.adopt(
            adoption, owner=self.owner, now=lease_now, lease_seconds=lease_seconds
        )
        if got is None:
            return None  # it moved since the replay read it: the next pass looks again
        record, audit_id = got
        if faults.plan is not None:
            faults.point("adoption.after_adopt", instance=instance.business_key)
        if self.metrics is not None:
            self.metrics.adopted(record)
        log.info(
            "adopted %s from %s v%s fingerprint %s onto fingerprint %s after a clean replay "
            "of %d position(s) (audit #%d)",
            record.instance_id,
            record.workflow_name,
            record.workflow_version,
            instance.fingerprint,
            record.fingerprint,
            verdict.replayed,
            audit_id,
            extra=journal_log.identity(record, worker=self.owner),
        )
        return record

    async def _verdict(
        self, definition: WorkflowDefinition, instance: InstanceRecord, journal: Journal
    ) -> ReplayVerdict:
        length = len(journal.steps) + len(journal.effects)
        key = (instance.instance_id, instance.run, length, definition.fingerprint)
        verdict = self._verdicts.get(key)
        if verdict is None:
            moved = dataclasses.replace(instance, fingerprint=definition.fingerprint)
            verdict = await replay(
                definition, moved, journal, codec=self.codec, registry=self.registry
            )
            self._verdicts[key] = verdict
            while len(self._verdicts) > limits.ADOPTION_VERDICTS_KEPT_MAX:
                self._verdicts.popitem(last=False)
            if not verdict.compatible:
                log.warning(
                    "not adopting %s: %s",
                    instance.instance_id,
                    divergence_evidence(instance, definition, verdict),
                    extra=journal_log.identity(instance, worker=self.owner),
                )
        return verdict

    async def _diverged(
        self, instance: InstanceRecord, definition: WorkflowDefinition, verdict: ReplayVerdict
    ) -> None:
        await self.store.call(
            self.flags.raise_flag,
            instance_id=instance.instance_id,
            reason_code=REPLAY_DIVERGENCE,
            evidence=divergence_evidence(instance, definition, verdict),
            detected_by=f"adoption:{self.owner}",
            now=self.clock.now(),
        )

    def _audit_entry(
        self, instance: InstanceRecord, definition: WorkflowDefinition, verdict: ReplayVerdict
    ) -> AuditEntry:
        plan = {
            "from": {"version": instance.workflow_version, "fingerprint": instance.fingerprint},
            "to": {"version": definition.version, "fingerprint": definition.fingerprint},
        }
        return AuditEntry(
            actor=f"ledgerflow:worker:{self.owner}",
            role=None,
            kind=ADOPT,
            instance_id=instance.instance_id,
            target=f"{definition.name}@{definition.version}",
            fingerprint=f"{ADOPT}:{instance.instance_id}:{definition.fingerprint}",
            outcome="applied",
            reason=(
                f"adopt {definition.name} v{instance.workflow_version} {instance.fingerprint} "
                f"-> {definition.fingerprint}: no live worker serves the pinned code, and the "
                f"journal replays clean over {verdict.replayed} position(s)"
            ),
            evidence=json.dumps(verdict.to_json(), sort_keys=True),
            plan=json.dumps(plan, sort_keys=True),
        )
