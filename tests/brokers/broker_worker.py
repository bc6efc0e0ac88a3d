"""A worker process with its relay: drives the order workflow (publishing its charges) and
carries the participant's replies back, until killed. Faults come from LEDGERFLOW_FAULTS."""

from __future__ import annotations

import asyncio
import sys

from broker_workflows import payments, registry

import ledgerflow as lf
from ledgerflow.runtime import faults


async def main(db: str) -> None:
    faults.install_from_environment()
    async with lf.Engine(db, registry) as engine:
        relay: lf.RabbitMQRelay | lf.NatsRelay
        if isinstance(payments, lf.participant.NatsParticipant):
            relay = lf.NatsRelay(engine, payments.route)
        else:
            relay = lf.RabbitMQRelay(engine, payments.route)
        worker = engine.worker(lease_seconds=3.0, poll_seconds=0.2)
        await asyncio.gather(worker.run(), relay.run())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
