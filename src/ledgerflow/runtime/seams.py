"""What an engine hands each of its parts, built once per engine (internal).

A worker, its executor, its adopter and its periodic tasks all need the same few things: the
clock (where a test substitutes time), the store executor (the one thread the store is used
from, and whether it runs inline), the codec, and the observers (metrics and tracing, None
when off). :class:`Runtime` holds them, so the engine builds them once and a part is handed one
object instead of five arguments that could drift apart. Nothing in it asks what kind of clock
or store it holds: a test double is just another value of the same field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ledgerflow.model.codec import Codec
from ledgerflow.runtime.clock import Clock
from ledgerflow.runtime.doorbell import Doorbell
from ledgerflow.runtime.metrics import Metrics
from ledgerflow.runtime.store_thread import AsyncStore

if TYPE_CHECKING:
    # Imported only by an engine made with tracing (the otel extra).
    from ledgerflow.runtime.tracing import Tracing


@dataclass(frozen=True, slots=True, kw_only=True)
class Runtime:
    """One engine's seams. Example (what :class:`~ledgerflow.runtime.engine.Engine` builds)::

    runtime = Runtime(clock=SYSTEM_CLOCK, store=AsyncStore(store), codec=JSON)
    worker = Worker(runtime=runtime, registry=registry)
    """

    clock: Clock
    # The store executor: every store call of the engine's parts runs through it.
    store: AsyncStore
    codec: Codec
    # None: nothing is counted (see ledgerflow.runtime.metrics) / no spans are made.
    metrics: Metrics | None = None
    tracing: Tracing | None = None
    # Rung by a commit that publishes a value: the engine's own waiting callers wake at once.
    doorbell: Doorbell = field(default_factory=Doorbell)
