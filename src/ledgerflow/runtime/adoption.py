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
- refused as an operator's move is (:func:`move_refusal`, then :func:`in_doubt_refusal`): a
  compensation under way, a live lease, or an UNKNOWN effect the replay does not reach asking
  for that very effect (flagged ``adoption_refused``, saying which effect and how it moves).

An UNKNOWN effect alone refuses nothing: when the replay reaches its position and the code
asks for the same effect there (participant, operation, name and input; the key is the one the
effect was minted with), the adopter drives the instance and its effect driver settles the
UNKNOWN exactly as the old code would have (the participant's lookup first; a re-send under the
same key where the participant deduplicates; else parked for an operator). Once no worker with
the old code is live, nobody else could settle it.

Verdicts are kept per (instance, run, generation, journal length, fingerprint), so a journal is
replayed against one code once, however often the worker looks.
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
from ledgerflow.model.detection import ADOPTION_REFUSED, REPLAY_DIVERGENCE, DetectionBounds
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


COMPENSATING_REFUSAL = "a compensation is in progress"


def move_refusal(instance: InstanceRecord, journal: Journal, *, now: float) -> str | None:
    """Why an instance may not be moved to other code now, before any replay (an operator's
    upgrade or a worker's adoption), or None: a compensation under way finishes on the code
    that began it, and a live lease belongs to a worker driving it. After the replay,
    :func:`in_doubt_refusal` decides its UNKNOWN effects."""
    if instance.status in (InstanceStatus.COMPENSATING, InstanceStatus.CANCELLING) or any(
        seq < 0 for seq in journal.steps
    ):
        return COMPENSATING_REFUSAL
    if (
        instance.owner is not None
        and instance.lease_expires_at is not None
        and instance.lease_expires_at > now
    ):
        return f"worker {instance.owner} holds a live lease"
    return None


def in_doubt_refusal(
    instance: InstanceRecord, journal: Journal, verdict: ReplayVerdict, *, code: str
) -> str | None:
    """Why the UNKNOWN effects of a journal that replays clean against ``code`` (its label)
    refuse the move, or None: each must sit at a position the replay reached with the code
    asking for that very effect (``verdict.reached_open``), so that the moved instance's
    effect driver settles it by the protocol (lookup first, the same key), as the code that
    sent it would. One the replay does not reach is settled only by that code or a person."""
    unknown = sorted(
        (e for e in journal.effects.values() if e.state is EffectState.UNKNOWN),
        key=lambda e: e.seq,
    )
    unreached = [e for e in unknown if int(e.seq) not in verdict.reached_open]
    if not unreached:
        return None
    effect = unreached[0]
    stopped = verdict.replayed + 1
    return (
        f"effect {effect.participant}.{effect.operation} at position {effect.seq} (key "
        f"{effect.idempotency_key}) is UNKNOWN, and the replay against {code} does not reach "
        f"it asking for that effect (the journal proves the code up to position {stopped}), "
        "so no worker but one with the code that sent it settles it: run a worker with that "
        f"code, or settle it with `ledgerflow repair resolve-effect {instance.instance_id} "
        f"{effect.seq} --applied|--not-applied --evidence JSON` (the participant's own record)"
    )


def in_doubt_note(journal: Journal) -> str:
    """What a divergence adds when the journal holds an UNKNOWN effect: nobody else settles it."""
    unknown = sorted(
        (e for e in journal.effects.values() if e.state is EffectState.UNKNOWN),
        key=lambda e: e.seq,
    )
    if not unknown:
        return ""
    effect = unknown[0]
    return (
        f"; it holds UNKNOWN effect {effect.participant}.{effect.operation} at position "
        f"{effect.seq} (key {effect.idempotency_key}), which only its code or "
        f"`ledgerflow repair resolve-effect {effect.instance_id} {effect.seq}` settles"
    )


def divergence_evidence(
    instance: InstanceRecord,
    definition: WorkflowDefinition,
    verdict: ReplayVerdict,
    *,
    note: str = "",
) -> str:
    """What a person reads on a ``replay_divergence`` flag: where the code and the journal part."""
    pinned = Served(instance.workflow_name, instance.workflow_version, instance.fingerprint)
    code = Served(definition.name, definition.version, definition.fingerprint)
    return (
        f"pinned to {pinned.label}, which no live worker serves; the journal does not replay "
        f"against {code.label} ({verdict.kind} at position {verdict.position}: the journal "
        f"holds {verdict.holds or 'nothing'}, the code asks for {verdict.asks or 'nothing'}"
        f"{note}). Not adopted, not touched: run a worker with its code, or move it with a "
        "declared migration (docs/versioning.md)"
    )[:4000]


_Key = tuple[str, int, int, int, str]


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
        # Instances refused for an UNKNOWN effect (flagged), with when: looked at again later.
        self._refused: OrderedDict[InstanceId, float] = OrderedDict()
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
            # A journal found divergent is not looked at again, one refused not for a while:
            # they would crowd the candidates.
            running=[*running, *self._divergent, *self._recently_refused()],
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

    def _recently_refused(self) -> list[InstanceId]:
        since = self.clock.now() - limits.ADOPTION_REFUSED_RECHECK_SECONDS
        while self._refused and next(iter(self._refused.values())) < since:
            self._refused.popitem(last=False)
        return list(self._refused)

    async def _one(
        self, instance: InstanceRecord, *, lease_seconds: float, lease_now: float | None
    ) -> InstanceRecord | None:
        definition = self.registry.get(instance.workflow_name, instance.workflow_version)
        journal = await self.store.journal(instance.instance_id, instance.run)
        if move_refusal(instance, journal, now=self.clock.now()) is not None:
            # A race with the choice (which takes neither): the waiter's LF403 names it.
            return None
        verdict = await self._verdict(definition, instance, journal)
        if not verdict.compatible:
            await self._diverged(instance, definition, verdict, note=in_doubt_note(journal))
            self._divergent[instance.instance_id] = None
            while len(self._divergent) > limits.ADOPTION_VERDICTS_KEPT_MAX:
                self._divergent.popitem(last=False)
            return None
        code = Served(definition.name, definition.version, definition.fingerprint).label
        refused = in_doubt_refusal(instance, journal, verdict, code=code)
        if refused is not None:
            await self._refuse(instance, refused)
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
        # The generation too: an effect settled by a repair changes no length (every owner's
        # write and every repair raises the generation).
        length = len(journal.steps) + len(journal.effects)
        key = (
            instance.instance_id,
            instance.run,
            instance.generation,
            length,
            definition.fingerprint,
        )
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
                    divergence_evidence(instance, definition, verdict, note=in_doubt_note(journal)),
                    extra=journal_log.identity(instance, worker=self.owner),
                )
        return verdict

    async def _diverged(
        self,
        instance: InstanceRecord,
        definition: WorkflowDefinition,
        verdict: ReplayVerdict,
        *,
        note: str,
    ) -> None:
        await self.store.call(
            self.flags.raise_flag,
            instance_id=instance.instance_id,
            reason_code=REPLAY_DIVERGENCE,
            evidence=divergence_evidence(instance, definition, verdict, note=note),
            detected_by=f"adoption:{self.owner}",
            now=self.clock.now(),
        )

    async def _refuse(self, instance: InstanceRecord, refused: str) -> None:
        """Flag (and say once) an instance its UNKNOWN effect keeps from this code."""
        pinned = Served(instance.workflow_name, instance.workflow_version, instance.fingerprint)
        evidence = f"pinned to {pinned.label}, which no live worker serves: not adopted: {refused}"
        raised = await self.store.call(
            self.flags.raise_flag,
            instance_id=instance.instance_id,
            reason_code=ADOPTION_REFUSED,
            evidence=evidence[:4000],
            detected_by=f"adoption:{self.owner}",
            now=self.clock.now(),
        )
        if raised or instance.instance_id not in self._refused:
            log.warning(
                "not adopting %s: %s",
                instance.instance_id,
                evidence,
                extra=journal_log.identity(instance, worker=self.owner),
            )
        self._refused.pop(instance.instance_id, None)
        self._refused[instance.instance_id] = self.clock.now()
        while len(self._refused) > limits.ADOPTION_VERDICTS_KEPT_MAX:
            self._refused.popitem(last=False)

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
