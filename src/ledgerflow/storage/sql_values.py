"""The published values part of the SQL store: the owner's publication, inside the commit of
its journal position, and the readers' reads (internal; see :mod:`ledgerflow.ledger.values`)."""

from __future__ import annotations

from ledgerflow import limits
from ledgerflow.ledger.records import Commit
from ledgerflow.ledger.values import Published, PublishValue
from ledgerflow.model.ids import InstanceId
from ledgerflow.storage.rows import Row
from ledgerflow.storage.sql_seam import SqlSeam


def _published(row: Row) -> Published:
    return Published(
        instance_id=InstanceId(row["instance_id"]),
        name=str(row["name"]),
        value_text=str(row["value"]),
        version=int(row["version"]),
        run=int(row["run"]),
        seq=int(row["seq"]),
        published_at=float(row["published_at"]),
    )


class ValueStore(SqlSeam):
    def _write_value(self, write: PublishValue, commit: Commit, now: float) -> None:
        """Publish in the owner's fenced commit (the fence ran first)."""
        params = {
            "instance_id": commit.instance_id,
            "name": write.name,
            "value": write.value,
            "run": write.run,
            "seq": write.seq,
            "now": now,
        }
        self._run("publish_value", params)

    def published(self, instance_id: InstanceId, name: str) -> Published | None:
        """The value last published under ``name``; None when none was."""
        with self._read():
            rows, _ = self._run("select_value", {"instance_id": instance_id, "name": name})
        return _published(rows[0]) if rows else None

    def published_values(self, instance_id: InstanceId) -> list[Published]:
        """Every value the instance published, by name (at most ``limits.VALUES_SHOWN_MAX``)."""
        params = {"instance_id": instance_id, "limit": limits.VALUES_SHOWN_MAX}
        with self._read():
            rows, _ = self._run("select_values", params)
        return [_published(row) for row in rows]
