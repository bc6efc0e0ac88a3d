"""The instance page's input and result, its signal and approval form, and the rule that a
page offers only the forms the principal's role and the instance's state allow (in-process,
Starlette's TestClient, over real SQLite journals).

The browser walks the approval in ``test_console_actions_browser.py``.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from approval_world import Approvals, drain
from approval_world import build as build_approvals
from console_client import csrf_of
from console_client import signed_in_with as as_
from perimeter_world import World
from perimeter_world import build as build_perimeter
from starlette.exceptions import StarletteDeprecationWarning

from ledgerflow.operators.service import AuditQuery, Operations

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)


@pytest.fixture
def approvals(tmp_path: Path) -> Approvals:
    return build_approvals(f"sqlite:///{tmp_path}/approvals.db")


@pytest.fixture
def world(tmp_path: Path) -> World:
    return build_perimeter(f"sqlite:///{tmp_path}/perimeter.db")


def _form(page: str, form_id: str) -> str | None:
    found = re.search(rf'<form [^>]*id="{form_id}".*?</form>', page, re.S)
    return found.group(0) if found else None


def _options(form: str, name: str) -> list[str]:
    select = re.search(rf'<select name="{name}">(.*?)</select>', form, re.S)
    return re.findall(r'<option value="([^"]*)"', select.group(1)) if select else []


def test_the_instance_page_shows_the_input_and_the_result(approvals: Approvals) -> None:
    """Goal: the page shows the workflow's input and, once it succeeded, its result, as
    ``ledgerflow show`` does.

    Method: the succeeded ``patient`` instance: its input (0.0) under #input, its result
    ({"timed_out": true}, indented) under #result; the waiting refund says no result yet.
    """
    with as_(approvals.url, approvals.tokens["olga"]) as client:
        page = client.get(f"/console/instances/{approvals.done}").text
        inputs = page.split('id="input"')[1].split("</section>")[0]
        result = page.split('id="result"')[1].split("</section>")[0]
        assert "0.0" in inputs
        assert "&#34;timed_out&#34;: true" in result
        waiting = client.get(f"/console/instances/{approvals.refund}").text
        assert "none recorded yet" in waiting.split('id="result"')[1].split("</section>")[0]


def test_an_approver_approves_from_the_console_once(approvals: Approvals) -> None:
    """Goal: a human-approval workflow is approved from the console by the signed-in user,
    through the API's signal operation: audited, and a form sent twice is one event.

    Method: as alice (an approver) the page names the wait and offers "Approve as alice"
    with the event's name filled in; post it twice with the page's event id: both redirect
    to the page, which says the event was accepted; the inbox holds it once, the audit log
    has alice's signal; a worker finishes the workflow with alice as the approver.
    """
    with as_(approvals.url, approvals.tokens["alice"]) as client:
        page = client.get(f"/console/instances/{approvals.refund}").text
        assert "an approval by one of alice, bob" in page
        form = _form(page, "signal-form")
        assert form is not None
        assert "Approve as alice" in form
        assert 'name="name" required value="refund"' in form
        event_id = re.search(r'name="event_id" value="([^"]+)"', form)
        assert event_id is not None
        fields = {"csrf": csrf_of(page), "name": "refund", "event_id": event_id.group(1),
                  "payload": '{"approved": true}'}  # fmt: skip
        target = f"/console/instances/{approvals.refund}/signals"
        first, again = client.post(target, data=fields), client.post(target, data=fields)
        for answer in (first, again):
            assert answer.status_code == 303, answer.text
            assert answer.headers["location"].endswith(f"?sent={event_id.group(1)}")
        shown = client.get(answer.headers["location"]).text
        said = r'id="delivered">Sent refund .* as alice; the inbox holds it PENDING'
        assert re.search(said, shown), shown
    drain(approvals.url)
    with Operations(approvals.url) as operations:
        detail = operations.detail(approvals.refund)
        signals = operations.audit(AuditQuery(instance_id=detail.instance.instance_id))
    assert detail.instance.status.value == "SUCCEEDED"
    assert detail.instance.result_value == {"by": "alice", "decision": {"approved": True}}
    assert [d.event_id for d in detail.inbox] == [event_id.group(1)]
    assert [(a.kind, a.actor) for a in signals if a.kind == "signal"][:1] == [("signal", "alice")]


def test_someone_not_named_cannot_approve_and_a_viewer_cannot_signal(
    approvals: Approvals,
) -> None:
    """Goal: the approval is offered only to the people it names; the console refuses an
    approval from anyone else as the API does (403, the refusal kept), and a viewer has no
    signal form and no way to post one.

    Method: as mallory (a signaller, not an approver) the page says who may approve and
    fills in no event name; her post of the approval anyway is a 403 page. As victor
    (viewer) there is no signal form, and his post with a valid CSRF token is 403.
    """
    target = f"/console/instances/{approvals.refund}/signals"
    with as_(approvals.url, approvals.tokens["mallory"]) as client:
        page = client.get(f"/console/instances/{approvals.refund}").text
        assert "Only alice, bob may approve refund; you are mallory." in page
        form = _form(page, "signal-form") or ""
        assert 'name="name" required value=""' in form
        refused = client.post(
            target, data={"csrf": csrf_of(page), "name": "refund", "event_id": "m-1"}
        )
        assert refused.status_code == 403
        assert "may not approve &#39;refund&#39; (approvers: &#39;alice&#39;, &#39;bob&#39;)" in (
            refused.text
        )
    with as_(approvals.url, approvals.tokens["victor"]) as client:
        page = client.get(f"/console/instances/{approvals.refund}").text
        assert _form(page, "signal-form") is None
        forged = client.post(
            target, data={"csrf": csrf_of(page), "name": "refund", "event_id": "v-1"}
        )
        assert forged.status_code == 403
    with Operations(approvals.url) as operations:
        detail = operations.detail(approvals.refund)
    assert detail.instance.status.value == "WAITING"
    assert [(d.event_id, d.state) for d in detail.inbox] == [("m-1", "REJECTED")]


def test_an_ended_instance_offers_no_form(approvals: Approvals) -> None:
    """Goal: nothing can be done to a SUCCEEDED instance, so its page offers nothing, even
    to an admin: no signal, no cancel, no repair.

    Method: as root, open the succeeded instance: none of the three forms is there.
    """
    with as_(approvals.url, approvals.tokens["root"]) as client:
        page = client.get(f"/console/instances/{approvals.done}").text
        for form_id in ("signal-form", "cancel-form", "repair-form"):
            assert _form(page, form_id) is None, form_id


def test_repairs_are_offered_as_the_role_and_the_state_allow(world: World) -> None:
    """Goal: the repair form lists only the kinds the role holds and the state admits, and
    the step field lists only the steps they may act on; Cancel is offered only where a
    cancel request can be made.

    Method: the parked instance (its charge at step 1 UNKNOWN) as olga (operator): the kinds
    are resolve-effect, skip-step, resume and cancel (no force-terminal, no retry-step: no
    step failed; no compensation kind: none planned), the steps [1], no Cancel form (a
    parked instance takes cancel as a repair). As root (admin) force-terminal is offered
    too, with the terminal states the machine reaches from there. The waiting instance as
    olga: Cancel is offered and no repair applies.
    """
    with as_(world.url, world.tokens["olga"]) as client:
        page = client.get(f"/console/instances/{world.parked}").text
        form = _form(page, "repair-form")
        assert form is not None
        assert _options(form, "kind") == ["resolve-effect", "skip-step", "resume", "cancel"]
        assert _options(form, "seq") == ["", "1"]
        assert _form(page, "cancel-form") is None
        waiting = client.get(f"/console/instances/{world.waiting}").text
        assert _form(waiting, "cancel-form") is not None
        assert _form(waiting, "repair-form") is None
    with as_(world.url, world.tokens["root"]) as client:
        page = client.get(f"/console/instances/{world.parked}").text
        form = _form(page, "repair-form") or ""
        assert "force-terminal" in _options(form, "kind")
        # Only the terminal states the instance machine reaches from MANUAL_INTERVENTION.
        assert _options(form, "status") == ["", "COMPENSATED", "FAILED"]


def test_a_repair_that_needs_a_step_without_one_is_a_clear_422(world: World) -> None:
    """Goal: a repair posted without the step it acts on is refused with a sentence saying
    so, not the planner's "the current run has no step None".

    Method: as olga, post resolve-effect to the parked instance with the step blank: 422,
    and the page says to choose the step.
    """
    with as_(world.url, world.tokens["olga"]) as client:
        page = client.get(f"/console/instances/{world.parked}").text
        answer = client.post(
            f"/console/instances/{world.parked}/repairs/plan",
            data={"csrf": csrf_of(page), "kind": "resolve-effect", "reason": "r", "seq": ""},
        )
        assert answer.status_code == 422
        assert "a resolve-effect repair acts on one step: choose the step" in answer.text
        assert "None" not in answer.text
