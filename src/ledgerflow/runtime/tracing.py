"""Traces with OpenTelemetry: a span per instance run, step, effect dispatch, compensation and
wait (internal; the ``otel`` extra, ``docs/observability.md``).

Only an engine made with ``tracing=`` imports this module, and only this module imports
OpenTelemetry: without the extra, nothing of it is loaded. The API alone is used; the SDK,
its sampler and its exporters are the application's (the global tracer provider, or the one
given).

A run span covers one worker's session with an instance. The first session's span context is
kept with the instance (``trace_context``, W3C ``traceparent``): every later session, on any
worker, after any crash, starts its run span as a child of it, so one instance is one trace.
Work the journal already holds (a replayed step, a confirmed effect) gets no span: only what
is done now is traced. Identities are attributes (``ledgerflow.*``), never payloads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ledgerflow.ledger.records import InstanceRecord

_PROPAGATOR = TraceContextTextMapPropagator()
INSTRUMENTATION = "ledgerflow"


def _identity(instance: InstanceRecord) -> dict[str, Any]:
    return {
        "ledgerflow.tenant": instance.tenant,
        "ledgerflow.workflow": instance.workflow_name,
        "ledgerflow.version": instance.workflow_version,
        "ledgerflow.instance": instance.instance_id,
        "ledgerflow.run": instance.run,
        "ledgerflow.generation": instance.generation,
    }


class Tracing:
    """Where an engine's spans go: the tracer provider given, else the global one."""

    def __init__(self, provider: trace.TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer(INSTRUMENTATION, tracer_provider=provider)

    @contextmanager
    def run(self, instance: InstanceRecord, *, worker: str) -> Iterator[str | None]:
        """The span of one session with ``instance``; yields the trace context to keep with
        the instance when it has none yet (its first session), else None."""
        parent = _context_of(instance.trace_context)
        with self._tracer.start_as_current_span(
            f"ledgerflow.run {instance.workflow_name}",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes={**_identity(instance), "ledgerflow.worker": worker},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield _carrier_of(span) if instance.trace_context is None else None

    @contextmanager
    def span(self, name: str, instance: InstanceRecord, **attributes: Any) -> Iterator[None]:
        """A span for work done now inside the current run span (a step, a dispatch, a wait):
        ``attributes`` become ``ledgerflow.<name>``; an exception marks the span an error."""
        kind = (
            SpanKind.CLIENT
            if name.startswith(("ledgerflow.effect", "ledgerflow.comp"))
            else (SpanKind.INTERNAL)
        )
        extra = {f"ledgerflow.{k}": v for k, v in attributes.items() if v is not None}
        with self._tracer.start_as_current_span(
            name, kind=kind, attributes={**_identity(instance), **extra}
        ):
            yield


def _context_of(kept: str | None) -> Context | None:
    if not kept:
        return None
    try:
        carrier = json.loads(kept)
    except ValueError:
        return None
    return _PROPAGATOR.extract(carrier) if isinstance(carrier, dict) else None


def _carrier_of(span: trace.Span) -> str | None:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return json.dumps(carrier, sort_keys=True) if carrier else None
