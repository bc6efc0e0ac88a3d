"""A broken invariant, as the oracle reports it (internal: ``ledgerflow.testing.oracle``
exports it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str
    instance_id: str | None
    detail: str

    def __str__(self) -> str:
        where = f" [{self.instance_id}]" if self.instance_id else ""
        return f"{self.invariant}{where}: {self.detail}"
