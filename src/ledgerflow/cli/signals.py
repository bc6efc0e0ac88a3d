"""``ledgerflow signal``: deliver a signal, callback or approval from the command line (internal).

This module owns the operator's way of answering a waiting instance. It goes through the same
operators' service (:meth:`~ledgerflow.operators.service.Operations.signal`) as the HTTP
endpoint and prints the same answer, so a refusal reads the same wherever it came from. The
exit code is for scripts: 0 when the event is (or already was) kept for its wait, 1 when it
was refused — too late, the instance ended, or a sender who may not approve — with the reason
printed; 2 for input the command cannot read.
"""

from __future__ import annotations

import json
import sys

import click

from ledgerflow.cli.json_input import json_option_value
from ledgerflow.cli.options import actor_option, db_option
from ledgerflow.cli.render import inert
from ledgerflow.operators.service import Operations
from ledgerflow.operators.shapes import delivery_json, refused


@click.command()
@click.argument("instance_id")
@click.argument("name")
@click.option("--event-id", required=True, help="The event's id: repeating it is a no-op.")
@click.option(
    "--payload",
    "payload_text",
    help="The event's payload as JSON, @FILE to read it from a file, or - for stdin "
    "(default: null).",
)
@click.option("--sender", help="Who sends it (an approval's approver).")
@click.option("--step", type=int, help="Only for this step: refused if the step is closed.")
@click.option("--run", type=int, help="Only for this run: refused if the instance moved on.")
@actor_option
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a sentence.")
def signal(
    instance_id: str,
    name: str,
    event_id: str,
    payload_text: str | None,
    sender: str | None,
    step: int | None,
    run: int | None,
    actor: str | None,
    db: str,
    as_json: bool,
) -> None:
    """Deliver event NAME to instance INSTANCE_ID; safe to repeat with the same --event-id.

    Exit 0 when the event was accepted (or already had been), 1 when it was refused. The
    delivery is on the audit log, against --actor (default: local:USER).
    """
    payload = json_option_value(payload_text, "--payload")
    # Delivering needs no workflow code. The journal must exist.
    with Operations(db) as operations:
        delivered = operations.signal(
            instance_id,
            name,
            event_id=event_id,
            payload=payload,
            sender=sender,
            for_step=step,
            run=run,
            actor=(actor or "").strip() or None,
        )
    body = delivery_json(delivered)
    failed = refused(delivered)
    if as_json:
        click.echo(json.dumps(body, indent=2, sort_keys=True))
    else:
        verdict = "refused" if failed else "delivered"
        line = (
            f"{verdict}: {name} {event_id} to {delivered.delivery.instance_id}: {body['outcome']}"
        )
        click.echo(inert(line + (f" ({body['reason']})" if failed and body["reason"] else "")))
    if failed:
        sys.exit(1)


def register(group: click.Group) -> None:
    group.add_command(signal)
