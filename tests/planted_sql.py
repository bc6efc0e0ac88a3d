"""A defect planted in one named SQL block, for the tests that prove a check can fail: stores
opened from then on load the block with ``old`` replaced by ``new`` (nothing in the shipped
engine is a switch for it; the block must hold ``old``, so a planted defect never silently
plants nothing)."""

from __future__ import annotations

import pytest

from ledgerflow.storage import queries


def plant_sql(monkeypatch: pytest.MonkeyPatch, name: str, old: str, new: str) -> None:
    load = queries.load

    def planted(dialect: str) -> dict[str, str]:
        loaded = dict(load(dialect))
        assert old in loaded[name], f"{name} has no {old!r} to plant a defect in"
        loaded[name] = loaded[name].replace(old, new)
        return loaded

    monkeypatch.setattr(queries, "load", planted)
