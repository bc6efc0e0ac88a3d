"""Test-only switches that break the engine on purpose, one way at a time (internal).

They exist to prove the fault explorer is not vacuous: with a switch on, the explorer must find
a violation. Production code never sets them; each check is one set lookup.

- ``skip-intent``: the request leaves before its write-ahead intent is durable.
- ``new-key-on-redispatch``: a re-dispatch uses a fresh idempotency key.
- ``accept-stale-writes``: the store takes writes from an owner whose generation is stale.
- ``compensate-unconfirmed``: a failed instance also compensates effects never confirmed.
"""

from __future__ import annotations

SKIP_INTENT = "skip-intent"
NEW_KEY_ON_REDISPATCH = "new-key-on-redispatch"
ACCEPT_STALE_WRITES = "accept-stale-writes"
COMPENSATE_UNCONFIRMED = "compensate-unconfirmed"
ALL = frozenset({SKIP_INTENT, NEW_KEY_ON_REDISPATCH, ACCEPT_STALE_WRITES, COMPENSATE_UNCONFIRMED})

active: frozenset[str] = frozenset()


def enable(*names: str) -> None:
    global active
    unknown = set(names) - ALL
    if unknown:
        raise ValueError(f"unknown mutation(s): {sorted(unknown)}")
    active = frozenset(names)


def disable() -> None:
    global active
    active = frozenset()
