"""Authority files the tests write: one grant allowing the kinds asked for, held by the actors
named (by default ``local:ACCOUNT``, whom the command line acts as without a token)."""

from __future__ import annotations

import json
from pathlib import Path

from ledgerflow.operators.service import local_actor

# Everything an authority file can grant: every repair and every version command.
EVERYTHING = (
    "resolve-effect", "retry-step", "skip-step", "run-compensation", "skip-compensation",
    "resume", "force-terminal", "cancel", "upgrade", "migrate", "retire-version",
)  # fmt: skip


def granting(folder: Path, *kinds: str, actors: tuple[str, ...] = ()) -> str:
    """Write an authority file under ``folder`` whose one grant allows ``kinds`` (default:
    everything) to ``actors`` (default: the local principal); return its path."""
    path = folder / "authority.toml"
    held = actors or (local_actor(),)
    lines = ["[grants]", f"granted = {json.dumps(list(kinds or EVERYTHING))}", "[actors]"]
    lines += [f'{json.dumps(actor)} = ["granted"]' for actor in held]
    path.write_text("\n".join(lines) + "\n")
    return str(path)
