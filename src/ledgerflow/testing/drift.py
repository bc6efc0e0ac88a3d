"""Version drift in a simulated run: a worker with changed code appears mid-run (internal).

After the first worker's first life, the next lives run a changed registry (the scenario's
``drift``: the same workflow versions, other code, so other fingerprints). When it arrives an
operator upgrades (``ledgerflow versions upgrade``) every in-flight instance whose journal
replays clean against the new code (or, without the operator, the new code's worker adopts
what replays clean, each adoption audited); the others stay pinned to the code they started on.

The oracle's invariant: an instance's workflow code ran only on the code it was started on, or
on code a replay of its own journal proved compatible before it ran there; and that proof
still holds at the end (its final journal replays clean against that code).
"""

from __future__ import annotations

import json

from ledgerflow import limits
from ledgerflow.ledger.audit import AuditQuery
from ledgerflow.model.codec import JSON
from ledgerflow.model.definition import Registry
from ledgerflow.model.ids import InstanceId
from ledgerflow.operators.upgrades import UpgradeRequest, Upgrades
from ledgerflow.runtime.adoption import ADOPT
from ledgerflow.runtime.clock import Clock
from ledgerflow.runtime.replay import replay
from ledgerflow.storage import open_store
from ledgerflow.storage.store import Store
from ledgerflow.testing.oracle import Violation
from ledgerflow.testing.participants import World

EXPLORER_ACTOR = "explorer"
NEVER_UNPROVEN_CODE = "never-run-on-unproven-code"


class VersionDrift:
    """The drift of one run: whether it is still to come, and what the upgrade proved."""

    def __init__(self, original: Registry, changed: Registry | None, *, upgrade: bool) -> None:
        self.original = original
        self.changed = changed
        self.upgrade = upgrade
        self.pending = changed is not None
        # Instance -> fingerprints a replay of its journal proved before it was moved there.
        self.proven: dict[str, set[str]] = {}

    @property
    def upgraded(self) -> int:
        return sum(len(f) for f in self.proven.values())

    async def arrives(self, store: Store, *, clock: Clock) -> Registry:
        """The changed code arrives: upgrade what replays clean; the registry to run next."""
        self.pending = False
        assert self.changed is not None
        if self.upgrade:
            upgrades = Upgrades(store, self.changed, clock=clock, codec=JSON)
            for definition in self.changed.definitions():
                request = UpgradeRequest(
                    definition.name, definition.version, definition.fingerprint
                )
                report = await upgrades.upgrade_on_loop(request, actor=EXPLORER_ACTOR)
                for outcome in report.outcomes:
                    if outcome.outcome == "moved":
                        self.proven.setdefault(outcome.instance_id, set()).add(
                            definition.fingerprint
                        )
        return self.changed

    def _started_on(self) -> set[str]:
        return {d.fingerprint for d in self.original.definitions()}

    async def judge(self, url: str, world: World) -> list[Violation]:
        """The invariant, after quiescence (nothing when the run had no drift)."""
        if self.changed is None:
            return []
        violations = []
        started = self._started_on()
        store = open_store(url)
        try:
            self._adoptions(store)
        finally:
            store.close()
        for instance_id, fingerprints in world.ran_on.items():
            allowed = started | self.proven.get(instance_id, set())
            for fingerprint in sorted(set(fingerprints) - allowed):
                violations.append(
                    Violation(
                        NEVER_UNPROVEN_CODE,
                        instance_id,
                        f"its workflow code ran on {fingerprint}, which no replay of its "
                        "journal proved compatible",
                    )
                )
        store = open_store(url)
        try:
            violations += await self._proofs_hold(store)
        finally:
            store.close()
        return violations

    def _adoptions(self, store: Store) -> None:
        """A worker's adoption is a proof too: its audit record holds the clean replay it was
        made on (runtime/adoption.py); the journal is judged against that code at the end."""
        adopted = store.audit_records(AuditQuery(kind=ADOPT, limit=limits.AUDIT_LIMIT_MAX))
        for record in adopted:
            if record.instance_id is None or record.outcome != "applied":
                continue
            to = json.loads(record.plan)["to"]["fingerprint"]
            self.proven.setdefault(record.instance_id, set()).add(to)

    async def _proofs_hold(self, store: Store) -> list[Violation]:
        assert self.changed is not None
        by_fingerprint = {d.fingerprint: d for d in self.changed.definitions()}
        found = []
        for instance_id, fingerprints in sorted(self.proven.items()):
            instance = store.get_instance(InstanceId(instance_id))
            if instance is None or instance.fingerprint not in fingerprints:
                continue
            journal = store.journal(instance.instance_id, instance.run)
            verdict = await replay(
                by_fingerprint[instance.fingerprint], instance, journal, codec=JSON
            )
            if not verdict.compatible:
                found.append(
                    Violation(
                        NEVER_UNPROVEN_CODE,
                        instance_id,
                        f"moved to {instance.fingerprint}, its journal no longer replays "
                        f"against it: {verdict.reason}",
                    )
                )
        return found
