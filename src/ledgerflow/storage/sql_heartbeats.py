"""The heartbeats part of the SQL store: an effect attempt's heartbeat, inside its owner's
fenced commit (internal; see :class:`~ledgerflow.ledger.records.EffectHeartbeat`)."""

from __future__ import annotations

from ledgerflow.errors import AttemptSupersededError
from ledgerflow.ledger.records import Commit, EffectHeartbeat
from ledgerflow.storage.rows import Row
from ledgerflow.storage.sql_seam import SqlSeam


class HeartbeatStore(SqlSeam):
    database_clock: bool  # the store's (SqlStore, PostgresStore)

    def _heartbeat(self, write: EffectHeartbeat, commit: Commit, now: float) -> None:
        """Record the beat of the attempt in flight, or refuse it (a superseded attempt, an
        ended effect, a stale owner): the write changes one row or none."""

        def alive(_: list[Row], changed: int) -> None:
            if changed != 1:
                raise AttemptSupersededError(
                    f"effect {write.effect_id}: attempt {write.attempt} is no longer in flight",
                    instance_id=commit.instance_id,
                    effect_id=write.effect_id,
                    attempt=write.attempt,
                )

        # Its time: the one given, else the database's own clock, else the commit's.
        at = write.at if write.at is not None or self.database_clock else now
        params = {"effect_id": write.effect_id, "attempt": write.attempt, "at": at}
        beat = {"details": write.details, "timeout_seconds": write.timeout_seconds}
        self._send("heartbeat_effect", {**params, **beat, "generation": commit.generation}, alive)
