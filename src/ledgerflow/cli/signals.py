"""``ledgerflow signal``: deliver a signal, callback or approval from the command line (internal).

This module owns the operator's way of answering a waiting instance. With database access it
goes through the operators' service (:meth:`~ledgerflow.operators.service.Operations.signal`),
as ``local:ACCOUNT``; with ``--token`` it posts to the HTTP API as the token's principal. Both
print the same answer, so a refusal reads the same wherever it came from.

Who sends the event is who runs the command: ``local:ACCOUNT`` without a token (on the audit
log; the event itself names no sender then), and a ``--sender`` given then is only a claim,
kept as ``local:ACCOUNT claiming NAME``. No approval names such a claim among its approvers,
so an approval from the command line needs a token (whose principal is the approver, as over
HTTP); a plain signal takes the claim as its sender.

The exit code is for scripts: 0 when the event is (or already was) kept for its wait, 1 when it
was refused — too late, the instance ended, or a sender who may not approve — with the reason
printed; 2 for input the command cannot read.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from ledgerflow.cli.api_client import ApiClient, error_of, quoted
from ledgerflow.cli.json_input import json_option_value
from ledgerflow.cli.options import acting_options, api_of
from ledgerflow.cli.render import inert
from ledgerflow.operators.authority import claimed
from ledgerflow.operators.service import Operations, local_actor
from ledgerflow.operators.shapes import delivery_json, refused

# Said under a refused approval that came with no token: what would have worked.
APPROVAL_HINT = (
    "an approval from the command line needs --token: without one a --sender is only a "
    "claim (local:ACCOUNT claiming NAME)"
)


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
@click.option(
    "--sender",
    help="With --token: the token's name (anything else is refused). Without: a claim, kept "
    "as 'local:ACCOUNT claiming SENDER', which no approval takes.",
)
@click.option("--step", type=int, help="Only for this step: refused if the step is closed.")
@click.option("--run", type=int, help="Only for this run: refused if the instance moved on.")
@acting_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a sentence.")
def signal(
    instance_id: str,
    name: str,
    event_id: str,
    payload_text: str | None,
    sender: str | None,
    step: int | None,
    run: int | None,
    db: str | None,
    token: str | None,
    url: str | None,
    as_json: bool,
) -> None:
    """Deliver event NAME to instance INSTANCE_ID; safe to repeat with the same --event-id.

    Exit 0 when the event was accepted (or already had been), 1 when it was refused. The
    delivery is on the audit log, against local:ACCOUNT (or the token's principal).
    """
    payload = json_option_value(payload_text, "--payload")
    api = api_of(db=db, token=token, url=url)
    if api is not None:
        with api:
            body, failed = _over_api(api, instance_id, name, event_id, payload, sender, step, run)
        hint = None
    else:
        assert db is not None
        local = local_actor()
        # Delivering needs no workflow code. The journal must exist.
        with Operations(db) as operations:
            delivered = operations.signal(
                instance_id,
                name,
                event_id=event_id,
                payload=payload,
                sender=claimed(local, sender) if sender else None,
                for_step=step,
                run=run,
                actor=local,
            )
        body, failed = delivery_json(delivered), refused(delivered)
        hint = APPROVAL_HINT if body["outcome"] == "not-approver" else None
    if as_json:
        click.echo(json.dumps(body, indent=2, sort_keys=True))
    else:
        verdict = "refused" if failed else "delivered"
        line = f"{verdict}: {name} {event_id} to {body['instance_id']}: {body['outcome']}"
        click.echo(inert(line + (f" ({body['reason']})" if failed and body["reason"] else "")))
        if hint is not None:
            click.echo(hint, err=True)
    if failed:
        sys.exit(1)


def _over_api(
    api: ApiClient,
    instance_id: str,
    name: str,
    event_id: str,
    payload: Any,
    sender: str | None,
    step: int | None,
    run: int | None,
) -> tuple[dict[str, Any], bool]:
    """The delivery as the API kept it, and whether it was refused (a refused delivery is a
    problem that carries it; any other problem is raised as its error)."""
    request = {"event_id": event_id, "payload": payload, "sender": sender, "step": step, "run": run}
    status, document = api.call(
        "POST",
        f"/v1/instances/{quoted(instance_id)}/signals/{quoted(name)}",
        {k: v for k, v in request.items() if v is not None},
    )
    if status < 400:
        return document, False
    if isinstance(document.get("delivery"), dict):
        return document["delivery"], True
    raise error_of(document)


def register(group: click.Group) -> None:
    group.add_command(signal)
