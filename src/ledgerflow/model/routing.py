"""Work routed by capability: what a worker can run, as data the claim itself decides on.

An instance is pinned to a definition: its workflow, version and code fingerprint. A worker
*serves* the definitions its registry holds, and claims only instances pinned to one of them
(the store compares the three values in the claim's own SQL). So no worker ever holds an
instance it cannot run, and lacking a definition is never a reason to touch one: work that no
live worker serves stays where it is and is flagged (``no_capable_worker``) once it has waited
past a bound.

A new fingerprint of the same workflow and version adopts what no live worker serves any more
(:class:`OnNewCode`): a worker with that code replays each such instance's journal against it
and takes the instance over only if the replay is clean (:mod:`ledgerflow.runtime.adoption`).

Example::

    served = registry.served()          # (Served("order", 1, "3f9c..."), ...)
    store.claim(owner=worker_id, serves=served, ...)
"""

from __future__ import annotations

import enum
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


class OnNewCode(enum.Enum):
    """What a workflow's code does with instances of its workflow and version that are pinned
    to another fingerprint no live worker serves (a deploy replaced the code they started on).
    """

    # Replay each one's journal against this code; adopt it (audited) only if the replay is
    # clean, flag it with the divergence otherwise. The default.
    ADOPT_IF_REPLAY_CLEAN = "adopt_if_replay_clean"
    # Leave them pinned: only an operator moves them (``ledgerflow versions upgrade``).
    PINNED = "pinned"


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
