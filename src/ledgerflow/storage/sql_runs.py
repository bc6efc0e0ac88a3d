"""The runs part of the SQL store: one run closing and the next opening, in the owner's commit
(internal).

A :class:`~ledgerflow.ledger.records.ContinueRun` write is applied inside the owner's fenced
commit, so the switch is one transaction with whatever else the commit carries: the closing
run's effects are proven settled, its row of history is written, the instance moves to the
next run with that run's input, and every event no wait has taken is filed under the new run.
Any refusal rolls the whole commit back: the instance is on run N or on run N+1, never between.
"""

from __future__ import annotations

from collections.abc import Callable

from ledgerflow.errors import IllegalTransitionError, UnsettledEffectsError
from ledgerflow.ledger.records import Commit, ContinueRun, RunRecord
from ledgerflow.model.ids import InstanceId
from ledgerflow.storage.rows import Row, record_from_row
from ledgerflow.storage.sql_seam import SqlSeam

# Runs an instance may have closed, at most: far past any chain (one run per switch).
_EVERY_RUN = 2**62


class RunStore(SqlSeam):
    def _continue_run(self, write: ContinueRun, commit: Commit, now: float) -> None:
        ids = {"instance_id": commit.instance_id, "run": write.run}

        def settled(rows: list[Row], _: int) -> None:
            if rows[0]["n"]:
                raise UnsettledEffectsError(
                    f"run {write.run} may not continue as new: {rows[0]['n']} of its effects "
                    "are not settled (intended, dispatched or in doubt)",
                    machine="run",
                    state="OPEN",
                    event="continue-as-new",
                    instance_id=commit.instance_id,
                    run=write.run,
                    unsettled=int(rows[0]["n"]),
                )

        def one(what: str) -> Callable[[list[Row], int], None]:
            def changed_one(_: list[Row], changed: int) -> None:
                if changed != 1:
                    raise IllegalTransitionError(
                        f"run {write.run} does not {what}: the instance is on another run or "
                        "no longer running",
                        machine="run",
                        state="OPEN",
                        event="continue-as-new",
                        instance_id=commit.instance_id,
                    )

            return changed_one

        self._send("count_unsettled_run_effects", ids, settled)
        fenced = {**ids, "generation": commit.generation, "now": now}
        self._send("close_run", fenced, one("close"))
        self._send(
            "open_next_run",
            {**fenced, "input": write.input},
            one("open its successor"),
        )
        self._send(
            "move_pending_events",
            {"instance_id": commit.instance_id, "next_run": write.run + 1},
        )
        self._timeline(
            commit.instance_id,
            commit.generation,
            "run",
            str(write.run),
            str(write.run + 1),
            now,
            "continued as new",
        )

    def runs(self, instance_id: InstanceId, *, latest: int | None = None) -> list[RunRecord]:
        """The instance's closed runs (the ``latest`` ones when given), oldest first; its open
        run is the instance's ``run``."""
        limit = latest if latest is not None else _EVERY_RUN
        with self._read():
            rows, _ = self._run("select_runs", {"instance_id": instance_id, "limit": limit})
        return [record_from_row(RunRecord, r) for r in rows]
