"""Traces: the span tree of a workflow run across a worker crash and its resumption, with no
span for replayed work, and the participant given the ``traceparent`` of its effect's span.

In-process engines on a real SQLite journal, an SDK tracer provider with the in-memory
exporter (the SDK is the test's, as it is an application's), and a participant over real HTTP
(``traced_participant``). The crash is the fault plan's simulated death of the whole worker,
right after the participant applied the charge and before its answer was journaled.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from traced_participant import traced_participant
from traced_workflows import build

import ledgerflow as lf
from ledgerflow.runtime import faults
from ledgerflow.runtime.faults import FaultPlan, FaultRule, SimulatedCrash


@pytest.fixture
def exported() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def _named(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def _traceparent(span: ReadableSpan) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def test_a_run_across_a_crash_is_one_trace_without_replayed_spans(
    tmp_path: Path, exported: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """Goal: one instance is one trace across workers; the resumed run's span is a child of
    the first run's (its context kept with the instance); replayed work gets no span; the
    participant received the traceparent of the effect span that sent its request.

    Method: worker 1 runs step one and sends the charge, then dies (simulated crash) before
    the answer is journaled; worker 2 (another engine) takes over after the lease, settles
    the UNKNOWN charge by the lookup and runs step two. Then the exported spans are read.
    """
    provider, exporter = exported
    db = f"sqlite:///{tmp_path}/journal.db"
    with traced_participant("bank") as (url, seen):
        registry = build(url)
        instance_id = asyncio.run(_crash_then_resume(db, registry, provider))
    spans = list(exporter.get_finished_spans())

    assert len({s.context.trace_id for s in spans}) == 1
    first, second = sorted(_named(spans, "ledgerflow.run pay"), key=lambda s: s.start_time or 0)
    assert _parent(first) is None
    assert _parent(second) == first.context.span_id
    assert first.attributes is not None
    assert second.attributes is not None
    assert first.attributes["ledgerflow.instance"] == instance_id
    assert first.attributes["ledgerflow.worker"] != second.attributes["ledgerflow.worker"]
    assert second.attributes["ledgerflow.generation"] == 2
    # Step one ran once, before the crash: the replay after it has no span.
    [one] = _named(spans, "ledgerflow.step one")
    assert _parent(one) == first.context.span_id
    [charge] = _named(spans, "ledgerflow.effect bank.charge")
    assert _parent(charge) == first.context.span_id
    assert charge.attributes is not None
    assert charge.attributes["ledgerflow.key"].startswith("lf:default:bank/charge:")
    # After the crash: the lookup that settled the UNKNOWN charge, then step two.
    [lookup] = _named(spans, "ledgerflow.lookup bank.charge")
    [two] = _named(spans, "ledgerflow.step two")
    assert _parent(lookup) == _parent(two) == second.context.span_id
    assert len(spans) == 6, [s.name for s in spans]
    # The participant saw the effect span's context on the charge, the lookup's on the lookup.
    applies = [t for kind, _, t in seen.requests if kind == "apply"]
    lookups = [t for kind, _, t in seen.requests if kind == "lookup"]
    assert applies == [_traceparent(charge)]
    assert lookups == [_traceparent(lookup)]
    # The first run's context is what the journal keeps with the instance.
    with sqlite3.connect(f"{tmp_path}/journal.db") as conn:
        [(kept,)] = conn.execute(
            "SELECT trace_context FROM lf_instances WHERE instance_id = ?", (instance_id,)
        )
    assert json.loads(kept)["traceparent"] == _traceparent(first)


async def _crash_then_resume(db: str, registry: lf.Registry, provider: TracerProvider) -> str:
    faults.install(
        FaultPlan([FaultRule(point="effect.after_dispatch", action="crash", match={"seq": 2})])
    )
    try:
        async with lf.Engine(db, registry, tracing=provider) as engine:
            started = await engine.start("pay", key="p-1", input=1)
            with pytest.raises(SimulatedCrash):
                # Long enough not to lapse under load, short enough to take over soon.
                await engine.worker(lease_seconds=1.5, poll_seconds=0.01).run(until_idle=True)
    finally:
        faults.install(None)
    async with lf.Engine(db, registry, tracing=provider) as engine:
        await engine.worker(lease_seconds=10, poll_seconds=0.01).run(until_idle=True)
        record = await engine.get(started.instance_id)
        assert record.status is lf.InstanceStatus.SUCCEEDED
    return started.instance_id


def test_waits_and_compensations_have_their_spans(
    tmp_path: Path, exported: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """Goal: a wait, an effect, a failing step and the compensation that undoes the effect
    each have a span in the instance's trace; the failing step's span is an error.

    Method: an instance waits for "go" (its run ends, released), is signalled, charges, fails
    a step and compensates the charge; the spans of both runs are read.
    """
    provider, exporter = exported
    db = f"sqlite:///{tmp_path}/journal.db"
    with traced_participant("bank") as (url, seen):
        registry = build(url)

        async def main() -> lf.InstanceRecord:
            async with lf.Engine(db, registry, tracing=provider) as engine:
                started = await engine.start("refund", key="r-1", input=None)
                worker = engine.worker(poll_seconds=0.01)
                await worker.run(until_nothing_due=True)
                await engine.signal(started.instance_id, "go", event_id="go-1")
                await worker.run(until_idle=True)
                return await engine.get(started.instance_id)

        record = asyncio.run(main())
    assert record.status is lf.InstanceStatus.COMPENSATED
    spans = list(exporter.get_finished_spans())
    assert len({s.context.trace_id for s in spans}) == 1
    runs = _named(spans, "ledgerflow.run refund")
    assert len(runs) == 2
    waits = _named(spans, "ledgerflow.wait wait:go")
    # Waited in the first run (released), answered in the second.
    assert {_parent(w) for w in waits} == {r.context.span_id for r in runs}
    [charge] = _named(spans, "ledgerflow.effect bank.charge")
    [stock] = _named(spans, "ledgerflow.step stock")
    assert not stock.status.is_ok
    [undo] = _named(spans, "ledgerflow.compensation bank.refund")
    assert _parent(charge) == _parent(stock) == _parent(undo)
    assert [t for kind, op, t in seen.requests if op == "refund"] == [_traceparent(undo)]


def test_without_tracing_nothing_of_opentelemetry_is_imported(tmp_path: Path) -> None:
    """Goal: an engine without tracing never imports OpenTelemetry, and works where it is not
    installed at all.

    Method: a fresh interpreter where importing ``opentelemetry`` fails runs a workflow with
    a remote effect (over real HTTP) to its end, and checks ``sys.modules`` afterwards.
    """
    import subprocess
    import sys

    script = f"""
import asyncio, sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
sys.path.insert(0, {str(Path(__file__).parent)!r})
import ledgerflow as lf
from traced_workflows import build
from traced_participant import traced_participant
from traced_workflows import build

async def main(url):
    async with lf.Engine("sqlite:///{tmp_path}/j.db", build(url)) as engine:
        started = await engine.start("pay", key="p", input=1)
        await engine.worker(poll_seconds=0.01).run(until_idle=True)
        return await engine.result(started.instance_id, timeout=10)

with traced_participant("bank") as (url, seen):
    print(asyncio.run(main(url)), [t for _, _, t in seen.requests])
loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry") and sys.modules[m])
assert not loaded, loaded
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "{'entry': 1} [None]"
