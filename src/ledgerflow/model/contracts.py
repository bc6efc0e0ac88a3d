"""Participant contract versions: which recorded effects were written under another contract
than the code declares now.

An effect declaration may name the version of its participant's contract, the shape of the
payload it sends (``Participant.effect(contract_version=2)``); the journal records it with the
effect. A history whose effects were recorded under another version than the declaration
carries now cannot be replayed blindly: the payload the code would build is not the one the
participant took. :func:`contract_mismatches` lists them, for the replay checker and for a
migration plan that declares how an old contract's payload maps.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from ledgerflow.errors import RegistrationError
from ledgerflow.model.definition import Registry


class RecordedContract(Protocol):
    """What a recorded effect says of its contract (an ``EffectRecord`` is one)."""

    @property
    def seq(self) -> int: ...
    @property
    def participant(self) -> str: ...
    @property
    def operation(self) -> str: ...
    @property
    def contract_version(self) -> str | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ContractMismatch:
    """One recorded effect whose contract version is not the one declared now."""

    seq: int
    participant: str
    operation: str
    recorded: str | None
    declared: str | None

    def describe(self) -> str:
        def shown(version: str | None) -> str:
            return "none" if version is None else repr(version)

        return (
            f"step {self.seq} ({self.participant}.{self.operation}) was recorded under contract "
            f"version {shown(self.recorded)}; the code declares {shown(self.declared)}"
        )


def contract_mismatches(
    effects: Iterable[RecordedContract], registry: Registry
) -> list[ContractMismatch]:
    """The effects of a history recorded under another contract version than ``registry``
    declares for their operation, in step order.

    Compensations (negative positions) send their original's payload and are judged by it; an
    effect whose operation the registry does not declare is a divergence of its own, for the
    replay to report, not a contract mismatch.

    Example::

        for mismatch in contract_mismatches(detail.effects, registry):
            print(mismatch.describe())
    """
    found: list[ContractMismatch] = []
    for effect in sorted(effects, key=lambda e: e.seq):
        if effect.seq <= 0:
            continue
        try:
            declared = registry.effect(effect.participant, effect.operation).contract_version
        except RegistrationError:
            continue
        if declared != effect.contract_version:
            found.append(
                ContractMismatch(
                    seq=effect.seq,
                    participant=effect.participant,
                    operation=effect.operation,
                    recorded=effect.contract_version,
                    declared=declared,
                )
            )
    return found
