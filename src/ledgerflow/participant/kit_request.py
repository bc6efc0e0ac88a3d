"""One request to apply, as the participant kit reads it from the engine's wire (HTTP body or
broker message): the kit's input, kept apart from the kit's record so that each adapter reads a
request the same way and refuses a malformed one before anything is applied."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class KitRequest:
    """One request to apply, as the engine sends it (over HTTP or a broker)."""

    key: str
    """The effect's idempotency key (a compensation's own key)."""
    attempt: int
    """The attempt number; a lookup's fence refuses the attempts it covers."""
    operation: str
    payload: Any = None
    original_key: str | None = None
    """With a compensation: the key of the effect it undoes."""
    effect_id: str | None = None
    instance_id: str | None = None

    @classmethod
    def from_wire(cls, body: Mapping[str, Any]) -> KitRequest:
        """Read the engine's request body; ``ValueError`` saying what is wrong with it."""
        key, operation = body.get("key"), body.get("operation")
        attempt, original = body.get("attempt"), body.get("original_key")
        if not isinstance(key, str) or not key:
            raise ValueError("'key' must be a non-empty string")
        if not isinstance(operation, str) or not operation:
            raise ValueError("'operation' must be a non-empty string")
        if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
            raise ValueError("'attempt' must be a positive integer")
        if original is not None and (not isinstance(original, str) or not original):
            raise ValueError("'original_key' must be a non-empty string when given")
        ids = {name: body.get(name) for name in ("effect_id", "instance_id")}
        for name, value in ids.items():
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name!r} must be a string when given")
        return cls(
            key=key,
            attempt=attempt,
            operation=operation,
            payload=body.get("payload"),
            original_key=original,
            effect_id=ids["effect_id"],
            instance_id=ids["instance_id"],
        )
