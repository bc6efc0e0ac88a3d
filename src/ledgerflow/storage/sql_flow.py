"""The flow-control part of the SQL store: effect limits and each attempt's admission, decided
in one transaction per ask (internal).

An admission locks its flow key's row (``lock_flow_key``: PostgreSQL's row lock, SQLite's one
write lock), counts the key's effects in flight, asks the pure decision
(:func:`ledgerflow.model.flow.decide`) and writes the key's GCRA and the attempt's row before
it commits: two workers admitting effects of one key are decided one after the other, by the
database's clock, so a limit holds across every worker. See :mod:`ledgerflow.model.flow`.
"""

from __future__ import annotations

import hashlib
import json

from ledgerflow import limits
from ledgerflow.errors import FencedOutError
from ledgerflow.ledger.audit import AuditEntry
from ledgerflow.model.flow import (
    Admission,
    AdmissionState,
    Decision,
    FlowAsk,
    FlowLimit,
    KeyState,
    decide,
)
from ledgerflow.model.flow_order import Waiter, standing, start_tag
from ledgerflow.model.ids import Generation, InstanceId
from ledgerflow.storage.rows import Row
from ledgerflow.storage.sql_seam import SqlSeam


def _limit_from_row(r: Row) -> FlowLimit:
    in_flight = int(r["in_flight_max"])
    rate = r["rate_per_second"]
    return FlowLimit(
        scope=str(r["scope"]),
        concurrency_max=None if in_flight >= limits.FLOW_IN_FLIGHT_UNBOUNDED else in_flight,
        rate_per_second=None if rate is None else float(rate),
        burst=int(r["burst"] or 1),
        per=r["per"],
        fair_by=r["fair_by"],
        weights=json.loads(r["weights"]) if r["weights"] else {},
    )


def declared_text(limit: FlowLimit) -> str:
    """A declaration as the row keeps it, to tell whether the code's has changed."""
    bounds = {k: v for k, v in limit_record(limit).items() if k != "scope"}
    return json.dumps(bounds, sort_keys=True)


def limit_record(limit: FlowLimit) -> dict[str, object]:
    return {
        "scope": limit.scope,
        "concurrency_max": limit.concurrency_max,
        "rate_per_second": limit.rate_per_second,
        "burst": limit.burst,
        "per": limit.per,
        "fair_by": limit.fair_by,
        "weights": dict(limit.weights),
    }


def _waiter(r: Row) -> Waiter:
    return Waiter(
        effect_id=str(r["effect_id"]),
        attempt=int(r["attempt"]),
        priority=int(r["priority"]),
        tag=float(r["tag"] or 0.0),
        since=float(r["throttled_since"] or 0.0),
        retry_at=None if r["retry_at"] is None else float(r["retry_at"]),
        slot=None if r["slot"] is None else float(r["slot"]),
        fairness_key=str(r["fairness_key"]),
    )


def _admission_from_row(r: Row, now: float | None = None) -> Admission:
    def real(name: str) -> float | None:
        value = r[name]
        return None if value is None else float(value)

    return Admission(
        effect_id=str(r["effect_id"]),
        attempt=int(r["attempt"]),
        instance_id=str(r["instance_id"]),
        scope=str(r["scope"]),
        flow_key=str(r["flow_key"]),
        state=AdmissionState(r["state"]),
        reason=r["reason"],
        retry_at=real("retry_at"),
        admitted_at=real("admitted_at"),
        throttled_since=real("throttled_since"),
        throttled_seconds=float(r["throttled_seconds"]),
        concurrency_max=None if r["concurrency_max"] is None else int(r["concurrency_max"]),
        rate_per_second=real("rate_per_second"),
        burst=None if r["burst"] is None else int(r["burst"]),
        now=now,
        priority=int(r["priority"]),
        fairness_key=str(r["fairness_key"]),
        tag=real("tag"),
        weight=float(r["weight"]),
        passed_over=int(r["passed_over"]),
    )


class FlowStore(SqlSeam):
    def set_effect_limit(self, limit: FlowLimit | None, *, scope: str | None = None) -> None:
        """Set (or with ``limit`` None, remove the limit of ``scope``) an effect limit: a row of
        lf_limits whose scope is ``effect:PARTICIPANT.OPERATION``."""
        with self._write_transaction():
            if limit is None:
                self._run("delete_limit", {"scope": scope})
                return
            in_flight = limit.concurrency_max
            self._run(
                "set_effect_limit",
                {
                    "scope": limit.scope,
                    "in_flight_max": limits.FLOW_IN_FLIGHT_UNBOUNDED if in_flight is None
                    else in_flight,
                    "rate_per_second": limit.rate_per_second,
                    "burst": limit.burst,
                    "per": limit.per,
                    "fair_by": limit.fair_by,
                    "weights": json.dumps(dict(limit.weights)) if limit.weights else None,
                },
            )  # fmt: skip

    def declare_effect_limits(self, declared: list[FlowLimit], *, actor: str) -> list[FlowLimit]:
        """Apply the limits declared in code that are new or changed since last applied, each
        with its audit record, in one transaction; return those applied. A limit changed at run
        time since its declaration was last applied keeps the run-time change until the
        declaration itself changes."""
        applied: list[FlowLimit] = []
        with self._write_transaction():
            for limit in declared:
                text = declared_text(limit)
                rows, _ = self._run("select_effect_limit", {"scope": limit.scope})
                if rows and rows[0]["declared"] == text:
                    continue
                self.set_effect_limit(limit)
                self._run("set_declared_limit", {"scope": limit.scope, "declared": text})
                plan = json.dumps(limit_record(limit), sort_keys=True)
                identity = json.dumps(["flow-limit-declared", limit.scope, plan])
                self._insert_audit(
                    AuditEntry(
                        actor=actor, role=None, kind="flow-limit-declared", instance_id=None,
                        target=limit.scope, outcome="applied", evidence=None, plan=plan,
                        fingerprint=hashlib.sha256(identity.encode()).hexdigest(),
                        reason="declared in code" + (", changed" if rows else ""),
                    ),
                    self._database_now(),
                )  # fmt: skip
                applied.append(limit)
        return applied

    def _database_now(self) -> float:
        clock, _ = self._run("database_now", {})
        return float(clock[0]["now"])

    def effect_limits(self) -> list[FlowLimit]:
        with self._read():
            rows, _ = self._run("select_effect_limits", {})
        return [_limit_from_row(r) for r in rows]

    def flow_admissions(
        self,
        *,
        scope: str | None = None,
        state: AdmissionState | None = None,
        limit: int = limits.FLOW_ADMISSIONS_LISTED_MAX,
    ) -> list[Admission]:
        """Every kept admission (THROTTLED, ADMITTED, SETTLED), by scope, key and time."""
        params = {"scope": scope, "state": None if state is None else str(state), "limit": limit}
        with self._read():
            rows, _ = self._run("select_flow_admissions", params)
        return [_admission_from_row(r) for r in rows]

    def flow_admission(self, effect_id: str, attempt: int) -> Admission | None:
        with self._read():
            rows, _ = self._run(
                "select_flow_admission", {"effect_id": effect_id, "attempt": attempt}
            )
        return _admission_from_row(rows[0]) if rows else None

    def admit_effect(self, ask: FlowAsk, *, now: float | None) -> Admission | None:
        """Decide one attempt's dispatch under its scope's limit, in one transaction: admitted
        or THROTTLED with when to ask again (``now`` None: by the database's clock, read under
        the key's lock; a simulated clock passes its own). None when
        the scope has no limit: nothing is written and the effect is dispatched."""
        with self._write_transaction():
            rows, _ = self._run("select_effect_limit", {"scope": ask.scope})
            if not rows:
                return None
            limit = _limit_from_row(rows[0])
            self._fence_ask(ask)
            key = {"scope": ask.scope, "flow_key": ask.flow_key}
            self._run("ensure_flow_key", key)
            state_rows, _ = self._run("lock_flow_key", key)
            if now is None:
                # Read under the key's lock: the admissions of one key are decided, and
                # stamped, in one order by one clock (a GCRA needs its times not to go back).
                now = self._database_now()
            first = state_rows[0]
            state = KeyState(
                tat=float(first["tat"]), queue_tat=float(first["queue_tat"]),
                vtime=float(first["vtime"]),
            )  # fmt: skip
            in_flight = 0
            if limit.concurrency_max is not None:
                self._run("settle_flow_admissions", key)
                counted, _ = self._run("count_flow_in_flight", key)
                in_flight = int(counted[0]["n"])
            mine = {"effect_id": ask.effect_id, "attempt": ask.attempt}
            before, _ = self._run("select_flow_admission", mine)
            previous = _admission_from_row(before[0]) if before else None
            weight = limit.weight(ask.fairness_key)
            tag = previous.tag if previous is not None else None
            if tag is None:
                tag = self._first_tag(ask, state, weight)
            since = previous.throttled_since if previous is not None else None
            slot = None if not before or before[0]["slot"] is None else float(before[0]["slot"])
            me = Waiter(ask.effect_id, ask.attempt, ask.priority, tag, since or now, None, slot,
                        ask.fairness_key)  # fmt: skip
            waiters, _ = self._run("select_flow_waiters", key)
            stands = standing(me, [_waiter(w) for w in waiters], now=now)
            decision = decide(
                limit,
                state,
                in_flight=in_flight,
                slot=slot,
                standing=stands,
                tag=tag,
                now=now,
                poll_seconds=limits.FLOW_CONCURRENCY_POLL_SECONDS,
            )
            self._move_key(key, limit, state, decision)
            # Admitted before others in order: those silent (late) too long.
            self._record(ask, limit, decision, previous, now, tag=tag, weight=weight,
                         passed=stands.silent)  # fmt: skip
            fresh, _ = self._run("select_flow_admission", mine)
        return _admission_from_row(fresh[0], now=now)

    def _first_tag(self, ask: FlowAsk, state: KeyState, weight: float) -> float:
        """An attempt's first ask: its fairness tag, its place among the key's waiters."""
        fair = {"scope": ask.scope, "flow_key": ask.flow_key, "fairness_key": ask.fairness_key}
        finish, _ = self._run("select_flow_fair", fair)
        tag, finish_next = start_tag(
            vtime=state.vtime, finish=float(finish[0]["finish"]) if finish else None, weight=weight
        )
        self._run("set_flow_fair", {**fair, "finish": finish_next})
        return tag

    def _move_key(
        self, key: dict[str, str], limit: FlowLimit, state: KeyState, decision: Decision
    ) -> None:
        """Write what the decision moved: the slots behind one taken, the key's GCRA and
        virtual time, and the fairness rows left behind it."""
        if decision.shift_from is not None and limit.rate_per_second is not None:
            moved = {"from_slot": decision.shift_from, "interval": 1 / limit.rate_per_second}
            self._run("shift_flow_slots", {**key, **moved})
        after = decision.key_state
        if after != state:
            ahead = {"tat": after.tat, "queue_tat": after.queue_tat, "vtime": after.vtime}
            self._run("update_flow_key", {**key, **ahead})
            if after.vtime != state.vtime:
                self._run("prune_flow_fair", {**key, "vtime": after.vtime})

    def _fence_ask(self, ask: FlowAsk) -> None:
        """Refuse an ask from an owner that no longer holds the instance: a zombie takes no
        permit."""
        rows, _ = self._run("flow_instance", {"instance_id": ask.instance_id})
        if not rows or rows[0]["owner"] != ask.owner or rows[0]["generation"] != ask.generation:
            raise FencedOutError(
                "admission refused: this owner no longer holds the instance at this generation",
                instance_id=InstanceId(ask.instance_id),
                generation=Generation(ask.generation),
            )

    def _record(
        self,
        ask: FlowAsk,
        limit: FlowLimit,
        decision: Decision,
        previous: Admission | None,
        now: float,
        *,
        tag: float,
        weight: float,
        passed: int,
    ) -> None:
        """Write the attempt's admission row, and a timeline entry when it begins to wait and
        when, having waited, it is admitted."""
        since = previous.throttled_since if previous is not None else None
        admitted = decision.state is AdmissionState.ADMITTED
        if not admitted and since is None:
            since = now
        self._run(
            "upsert_flow_admission",
            {
                "effect_id": ask.effect_id,
                "attempt": ask.attempt,
                "scope": ask.scope,
                "flow_key": ask.flow_key,
                "instance_id": ask.instance_id,
                "state": str(decision.state),
                "reason": decision.reason,
                "slot": decision.slot,
                "throttled_since": since,
                "retry_at": decision.retry_at,
                "admitted_at": now if admitted else None,
                "throttled_seconds": (now - since) if since is not None else 0.0,
                "concurrency_max": limit.concurrency_max,
                "rate_per_second": limit.rate_per_second,
                "burst": limit.burst,
                "priority": ask.priority,
                "fairness_key": ask.fairness_key,
                "tag": tag,
                "weight": weight,
                "passed_over": passed if admitted else 0,
            },
        )
        if since is not None and (previous is None or admitted):
            detail = f"attempt {ask.attempt}, key {ask.flow_key}" + (
                f": {decision.reason}" if decision.reason else f" after {now - since:.3f}s"
            )
            self._timeline(
                InstanceId(ask.instance_id),
                Generation(ask.generation),
                f"flow:{ask.scope}",
                None if previous is None else str(AdmissionState.THROTTLED),
                str(decision.state),
                now,
                detail,
            )
