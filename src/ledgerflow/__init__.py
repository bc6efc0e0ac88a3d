"""Ledgerflow: a consistency-first durable workflow engine (the public front door).

General layout: ``model`` is the pure domain (states, transitions, identities), ``storage``
the one seam to a database, ``runtime`` the engine, workers and the effect protocol,
``participant`` how services are declared, ``cli`` the ``ledgerflow`` command. Only this
module, :mod:`ledgerflow.errors`, :mod:`ledgerflow.participant` and :mod:`ledgerflow.testing`
are public; everything else may change.

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

from ledgerflow.model.classification import Classification as Classification
from ledgerflow.model.codec import Codec as Codec
from ledgerflow.model.codec import JsonCodec as JsonCodec
from ledgerflow.model.definition import EffectCall as EffectCall
from ledgerflow.model.definition import Participant as Participant
from ledgerflow.model.definition import Registry as Registry
from ledgerflow.model.effect import EffectState as EffectState
from ledgerflow.model.effect import LookupAnswer as LookupAnswer
from ledgerflow.model.instance import InstanceStatus as InstanceStatus
from ledgerflow.model.retry import RetryPolicy as RetryPolicy
from ledgerflow.model.signal import Signal as Signal
from ledgerflow.model.step import StepStatus as StepStatus
from ledgerflow.runtime.context import WorkflowContext as WorkflowContext
from ledgerflow.runtime.engine import Delivered as Delivered
from ledgerflow.runtime.engine import DeliveryOutcome as DeliveryOutcome
from ledgerflow.runtime.engine import Engine as Engine
from ledgerflow.runtime.engine import InstanceDetail as InstanceDetail
from ledgerflow.runtime.engine import Started as Started
from ledgerflow.runtime.engine import SyncEngine as SyncEngine
from ledgerflow.runtime.worker import Worker as Worker
from ledgerflow.storage.records import Delivery as Delivery
from ledgerflow.storage.records import EffectRecord as EffectRecord
from ledgerflow.storage.records import InstanceRecord as InstanceRecord
from ledgerflow.storage.records import StepRecord as StepRecord
from ledgerflow.storage.records import TimelineEntry as TimelineEntry

__all__ = [
    # Declaring
    "Registry",
    "Participant",
    "Classification",
    "RetryPolicy",
    "EffectCall",
    "LookupAnswer",
    "WorkflowContext",
    "Codec",
    "JsonCodec",
    # Running
    "Engine",
    "SyncEngine",
    "Worker",
    "Started",
    "Signal",
    "Delivered",
    "DeliveryOutcome",
    # Reading the ledgers
    "InstanceDetail",
    "InstanceRecord",
    "StepRecord",
    "EffectRecord",
    "TimelineEntry",
    "Delivery",
    "InstanceStatus",
    "StepStatus",
    "EffectState",
]
