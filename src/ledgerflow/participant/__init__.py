"""Everything needed to declare a participant and its effects (public front door).

A participant is an independently committed service that workflows change through effects.
Participant code receives an :class:`EffectCall` carrying the effect's idempotency key, returns
evidence of what it applied, raises :class:`EffectRejectedError` when the participant proved
nothing was applied, and lets anything else propagate: that makes the outcome UNKNOWN.

A service that is itself the participant embeds the :class:`Kit`, which keeps its idempotency
record in the service's own database transaction (deduplication, fencing lookups, compensation
keys apart, a key-retention window), served over HTTP by :func:`kit_app` / :func:`kit_routes`
or behind a broker's consumer by :func:`handle_message`.
"""

from __future__ import annotations

from ledgerflow.errors import EffectRejectedError as EffectRejectedError
from ledgerflow.model.broker import NatsRoute as NatsRoute
from ledgerflow.model.broker import RabbitMQRoute as RabbitMQRoute
from ledgerflow.model.classification import Classification as Classification
from ledgerflow.model.compensation import Precondition as Precondition
from ledgerflow.model.compensation import PreconditionVerdict as PreconditionVerdict
from ledgerflow.model.definition import EffectCall as EffectCall
from ledgerflow.model.definition import EffectDeclaration as EffectDeclaration
from ledgerflow.model.definition import Participant as Participant
from ledgerflow.model.effect import LookupAnswer as LookupAnswer
from ledgerflow.model.effect import LookupVerdict as LookupVerdict
from ledgerflow.model.heartbeat import HeartbeatAnswer as HeartbeatAnswer
from ledgerflow.model.retry import RetryPolicy as RetryPolicy
from ledgerflow.participant.asgi import kit_app as kit_app
from ledgerflow.participant.asgi import kit_routes as kit_routes
from ledgerflow.participant.broker import handle_message as handle_message
from ledgerflow.participant.kit import Applied as Applied
from ledgerflow.participant.kit import Kit as Kit
from ledgerflow.participant.kit import Refused as Refused
from ledgerflow.participant.kit_request import KitRequest as KitRequest
from ledgerflow.participant.nats import NatsParticipant as NatsParticipant
from ledgerflow.participant.nats import declare_streams as declare_streams
from ledgerflow.participant.nats import nats_participant as nats_participant
from ledgerflow.participant.rabbitmq import RabbitMQParticipant as RabbitMQParticipant
from ledgerflow.participant.rabbitmq import declare_topology as declare_topology
from ledgerflow.participant.rabbitmq import rabbitmq_participant as rabbitmq_participant
from ledgerflow.participant.remote import remote_participant as remote_participant

__all__ = [
    "Applied",
    "Classification",
    "EffectCall",
    "EffectDeclaration",
    "EffectRejectedError",
    "HeartbeatAnswer",
    "Kit",
    "KitRequest",
    "LookupAnswer",
    "LookupVerdict",
    "NatsParticipant",
    "NatsRoute",
    "Participant",
    "Precondition",
    "PreconditionVerdict",
    "RabbitMQParticipant",
    "RabbitMQRoute",
    "Refused",
    "RetryPolicy",
    "declare_streams",
    "declare_topology",
    "handle_message",
    "kit_app",
    "kit_routes",
    "nats_participant",
    "rabbitmq_participant",
    "remote_participant",
]
