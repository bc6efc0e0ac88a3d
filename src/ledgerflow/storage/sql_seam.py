"""What every part of the SQL store stands on (internal).

A dialect supplies the first four (running a named query, a write transaction, a consistent
read, a savepoint); :class:`~ledgerflow.storage.sql_store.SqlStore` supplies the rest once for
all dialects. The store's parts (reads, starts, claims, inbox, attention, audit,
reconciliation) are mixins that declare nothing of this again.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from ledgerflow.model.ids import Generation, InstanceId
from ledgerflow.storage.rows import Row


class SqlSeam(abc.ABC):
    @abc.abstractmethod
    def _run(self, name: str, params: Mapping[str, Any]) -> tuple[list[Row], int]:
        """Run a named query; return its rows and the number of rows it changed."""

    @abc.abstractmethod
    def _write_transaction(self) -> contextlib.AbstractContextManager[None]:
        """A durable write transaction that holds the write lock from its first statement."""

    @abc.abstractmethod
    def _read(self) -> contextlib.AbstractContextManager[None]:
        """A consistent read."""

    @abc.abstractmethod
    def _savepoint(self, name: str) -> contextlib.AbstractContextManager[None]: ...

    @abc.abstractmethod
    def _send(
        self,
        name: str,
        params: Mapping[str, Any],
        check: Callable[[list[Row], int], None] | None = None,
    ) -> None:
        """Run a named query whose answer only decides whether the transaction may commit."""

    @abc.abstractmethod
    def _batch(self, *, hold: bool = True) -> contextlib.AbstractContextManager[None]:
        """Within a write transaction: statements whose checks may wait for the block's end."""

    @abc.abstractmethod
    def _timeline(
        self,
        instance_id: InstanceId,
        generation: Generation,
        subject: str,
        from_state: str | None,
        to_state: str,
        now: float,
        detail: str | None,
    ) -> None:
        """A line on the instance's timeline, in the current write transaction."""
