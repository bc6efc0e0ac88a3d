"""Work routed by capability: what a worker can run, as data the claim itself decides on.

An instance is pinned to a definition: its workflow, version and code fingerprint. A worker
*serves* the definitions its registry holds, and claims only instances pinned to one of them
(the store compares the three values in the claim's own SQL). So no worker ever holds an
instance it cannot run, and lacking a definition is never a reason to touch one: work that no
live worker serves stays where it is and is flagged (``no_capable_worker``) once it has waited
past a bound.

Example::

    served = registry.served()          # (Served("order", 1, "3f9c..."), ...)
    store.claim(owner=worker_id, serves=served, ...)
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class Served:
    """One definition a worker can run: workflow name, version and code fingerprint."""

    workflow_name: str
    workflow_version: int
    fingerprint: str

    @property
    def label(self) -> str:
        """``order v2 (fingerprint 3f9c0a1b2c3d)`` - how evidence and listings name it."""
        return f"{self.workflow_name} v{self.workflow_version} (fingerprint {self.fingerprint})"


def served_json(served: Iterable[Served]) -> str:
    """The definitions as the claim's SQL reads them: a JSON array of objects."""
    return json.dumps(
        [
            {
                "workflow_name": s.workflow_name,
                "workflow_version": s.workflow_version,
                "fingerprint": s.fingerprint,
            }
            for s in sorted(set(served))
        ]
    )


def serves(served: Iterable[Served], *, name: str, version: int, fingerprint: str) -> bool:
    """Whether one of ``served`` runs an instance pinned to (name, version, fingerprint)."""
    return Served(name, version, fingerprint) in set(served)
