"""Ledgerflow: a consistency-first durable workflow engine (the public front door).

Only this module, :mod:`ledgerflow.errors`, :mod:`ledgerflow.participant` and
:mod:`ledgerflow.testing` are public; everything else may change.

The packages stand in layers, lowest first. A module imports only from layers below its own:
never from a layer above, never from another package of its own layer. ``tests/test_layers.py``
reads the table below and holds every import to it::

    0  errors limits redaction log_muting extras deprecation
    1  model
    2  ledger
    3  storage
    4  runtime participant
    5  operators
    6  ledgerflow
    7  testing demo
    8  cli web

- 0, the foundation: the error tree and the named bounds that every layer raises and keeps, and
  the small tools storage and the faces share (redacting a URL, muting a library's log, naming
  a missing extra, warning of a renamed public name). They import only each other.
- 1, ``model``: the pure domain: identities, state machines as tables, classification, retry
  policies, the detection and repair rules. No I/O, no clock, no SQL.
- 2, ``ledger``: the ledgers as data: the records a store keeps and returns, the writes a
  commit carries, the transitions that decide them, the inbox's machine. Pure, as the model.
- 3, ``storage``: the one seam to a database, split by who uses it (the journal, detection, the
  operators), and all SQL.
- 4, ``runtime``: the engine, workers, replay, the effect protocol, the stuck-work scan and the
  fault points, typed against the journal part of the seam. Beside it, ``participant``: how a
  service is declared and reached (a remote HTTP adapter), on the model alone; neither
  imports the other.
- 5, ``operators``: what a person does: authority, audited repairs, the attention queue,
  reconciliation, and the one service every face calls (:mod:`ledgerflow.operators.service`).
- 6, ``ledgerflow``: this front door, which re-exports the engine and its records.
- 7, ``testing`` (the shipped fake clock, scripted participants, simulation and fault explorer,
  which drive the whole engine as a user's code would) and ``demo`` (a sample application: its
  workflow, its participant service, a reservation book), both built on what is below.
- 8, the faces, ``cli`` and ``web``: they call the engine and the operators' service, import
  nothing from the ledger or storage, and reach each other only through a package's front
  (``ledgerflow.web.create_app``, which ``ledgerflow serve`` runs).

Example::

    import ledgerflow as lf

    registry = lf.Registry()
    payments = registry.add_participant(lf.Participant("payments", deduplicates=True))

    @payments.effect(classification="compensatable")
    async def charge(call: lf.EffectCall) -> dict:
        ...

    @registry.workflow(name="order", version=1)
    async def order(ctx: lf.WorkflowContext, order: dict) -> dict:
        receipt = await ctx.effect(charge, {"amount": order["amount"]})
        return {"receipt": receipt}
"""

from __future__ import annotations

from ledgerflow.deprecation import renamed
from ledgerflow.errors import BusinessFailure as BusinessFailure
from ledgerflow.ledger.records import Delivery as Delivery
from ledgerflow.ledger.records import EffectRecord as EffectRecord
from ledgerflow.ledger.records import InstanceRecord as InstanceRecord
from ledgerflow.ledger.records import RunRecord as RunRecord
from ledgerflow.ledger.records import StepRecord as StepRecord
from ledgerflow.ledger.records import TimelineEntry as TimelineEntry
from ledgerflow.ledger.values import NotPublished as NotPublished
from ledgerflow.ledger.values import Published as Published
from ledgerflow.model.classification import Classification as Classification
from ledgerflow.model.codec import Codec as Codec
from ledgerflow.model.codec import JsonCodec as JsonCodec
from ledgerflow.model.definition import EffectCall as EffectCall
from ledgerflow.model.definition import Participant as Participant
from ledgerflow.model.definition import Registry as Registry
from ledgerflow.model.effect import EffectState as EffectState
from ledgerflow.model.effect import LookupAnswer as LookupAnswer
from ledgerflow.model.examples import Example as Example
from ledgerflow.model.flow import EffectLimit as EffectLimit
from ledgerflow.model.instance import InstanceStatus as InstanceStatus
from ledgerflow.model.retry import RetryPolicy as RetryPolicy
from ledgerflow.model.signal import Signal as Signal
from ledgerflow.model.step import StepStatus as StepStatus
from ledgerflow.runtime.children import ChildHandle as ChildHandle
from ledgerflow.runtime.context import WorkflowContext as WorkflowContext
from ledgerflow.runtime.engine import Delivered as Delivered
from ledgerflow.runtime.engine import DeliveryOutcome as DeliveryOutcome
from ledgerflow.runtime.engine import Engine as Engine
from ledgerflow.runtime.engine import InstanceDetail as InstanceDetail
from ledgerflow.runtime.engine import SignalStarted as SignalStarted
from ledgerflow.runtime.engine import Started as Started
from ledgerflow.runtime.metrics import Metrics as Metrics
from ledgerflow.runtime.nats_relay import NatsRelay as NatsRelay
from ledgerflow.runtime.relay import RabbitMQRelay as RabbitMQRelay
from ledgerflow.runtime.sync_engine import SyncEngine as SyncEngine
from ledgerflow.runtime.values import UpdateStarted as UpdateStarted
from ledgerflow.runtime.worker import Worker as Worker

# Renamed public names, kept for one minor version (ledgerflow.deprecation): old -> new.
_RENAMED = {"EventRecord": ("TimelineEntry", TimelineEntry)}


def __getattr__(name: str) -> object:
    """A renamed name still works, with a DeprecationWarning naming the new one."""
    if name in _RENAMED:
        new, value = _RENAMED[name]
        renamed(f"ledgerflow.{name}", f"ledgerflow.{new}")
        return value
    raise AttributeError(f"module 'ledgerflow' has no attribute {name!r}")


__all__ = [
    # Declaring
    "Registry",
    "Participant",
    "Classification",
    "RetryPolicy",
    "EffectCall",
    "EffectLimit",
    "LookupAnswer",
    "WorkflowContext",
    "ChildHandle",
    "Codec",
    "JsonCodec",
    "BusinessFailure",
    "Example",
    # Running
    "Engine",
    "SyncEngine",
    "Worker",
    "Started",
    "SignalStarted",
    "UpdateStarted",
    "Signal",
    "Delivered",
    "DeliveryOutcome",
    "Metrics",
    "NatsRelay",
    "RabbitMQRelay",
    # Reading the ledgers
    "InstanceDetail",
    "InstanceRecord",
    "StepRecord",
    "EffectRecord",
    "TimelineEntry",
    "Delivery",
    "RunRecord",
    "Published",
    "NotPublished",
    "InstanceStatus",
    "StepStatus",
    "EffectState",
]
