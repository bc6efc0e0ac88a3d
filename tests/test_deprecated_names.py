"""Public names renamed in the last issues keep working for one minor version, each with a
DeprecationWarning naming the new name (issue 24: ``InstanceDetail.events`` became
``.timeline`` and broke callers without notice). The suite turns warnings into errors, so each
use here expects its warning; CHANGELOG.md lists them under "Deprecated"."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import ledgerflow as lf


def _twice(value: int) -> int:
    return value * 2


def _detail(tmp_path: Path) -> lf.InstanceDetail:
    registry = lf.Registry()

    @registry.workflow(name="double", version=1)
    async def double(ctx: lf.WorkflowContext, value: int) -> int:
        return await ctx.step("twice", _twice, value)

    async def run() -> lf.InstanceDetail:
        async with lf.Engine(f"sqlite:///{tmp_path / 'journal.db'}", registry) as engine:
            started = await engine.start("double", key="k", input=2)
            await engine.worker(poll_seconds=0.01).run(until_idle=True)
            return await engine.detail(started.instance_id)

    return asyncio.run(run())


def test_instance_detail_events_is_the_timeline_with_a_warning(tmp_path: Path) -> None:
    """Goal: ``detail.events`` still answers (the timeline, the same list) and warns, naming
    ``InstanceDetail.timeline`` and the release that removes it. Method: a real run's detail."""
    detail = _detail(tmp_path)
    assert detail.timeline
    with pytest.warns(DeprecationWarning, match=r"InstanceDetail\.timeline now.*0\.3\.0"):
        events = detail.events
    assert events is detail.timeline


def test_a_timeline_entrys_event_id_is_its_entry_id_with_a_warning(tmp_path: Path) -> None:
    """Goal: ``entry.event_id`` (the old name) is ``entry.entry_id``, with a warning."""
    entry = _detail(tmp_path).timeline[0]
    with pytest.warns(DeprecationWarning, match=r"TimelineEntry\.entry_id"):
        assert entry.event_id == entry.entry_id


def test_event_record_is_timeline_entry_with_a_warning() -> None:
    """Goal: ``lf.EventRecord`` and ``from ledgerflow import EventRecord`` still give the
    class, now TimelineEntry, with a warning; it is not in ``__all__``; a name that never
    existed is still an AttributeError."""
    with pytest.warns(DeprecationWarning, match=r"ledgerflow\.TimelineEntry"):
        assert lf.EventRecord is lf.TimelineEntry
    with pytest.warns(DeprecationWarning, match=r"ledgerflow\.EventRecord is called"):
        from ledgerflow import EventRecord
    assert EventRecord is lf.TimelineEntry
    assert "EventRecord" not in lf.__all__
    with pytest.raises(AttributeError):
        _ = lf.NoSuchName
