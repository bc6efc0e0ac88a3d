"""The console's home page (in-process, Starlette's TestClient, over a real SQLite journal):
counts by status, the consistency signals and the last day's activity chart, each of the
principal's tenant only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from console_client import signed_in_with as as_
from perimeter_world import World, build

from ledgerflow.storage import open_store


@pytest.fixture
def world(tmp_path: Path) -> World:
    return build(f"sqlite:///{tmp_path}/console.db")


def _counts(page: str) -> dict[str, int]:
    table = page.split('id="statuses"')[1].split("</table>")[0]
    found = re.findall(r'<span class="badge">(\w+)</span></a></td><td>(\d+)</td>', table)
    return {status: int(n) for status, n in found}


def test_the_home_page_counts_what_the_tenant_holds(world: World) -> None:
    """Goal: an operator's home page counts the instances of their tenant by status, shows
    the open UNKNOWN outcomes with the oldest's age and the parked and flagged instances,
    and draws the last day's starts; another tenant's principal sees none of it.

    Method: as olga (acme): MANUAL_INTERVENTION 1 and WAITING 1, one open UNKNOWN (its age
    shown), one parked for effect_outcome_unknown, none flagged; the chart's bars add up to
    the two instances acme started. As gail (globex): WAITING 1, no UNKNOWN, nothing parked.
    As root (every tenant): three instances.
    """
    with as_(world.url, world.tokens["olga"]) as client:
        page = client.get("/console").text
        assert _counts(page) == {"WAITING": 1, "MANUAL_INTERVENTION": 1}
        unknown = page.split('id="signal-unknown"')[1].split("</a>")[0]
        said = r"<strong>1</strong> open UNKNOWN outcome<span>the oldest \d+ s old"
        assert re.search(said, unknown), unknown
        parked = page.split('id="signal-parked"')[1].split("</a>")[0]
        assert "<strong>1</strong> parked" in parked
        assert "1 effect_outcome_unknown" in parked
        assert "<strong>0</strong> flagged" in page
        bars = re.findall(r'<rect class="seg group-([a-z-]+)"', page)
        assert sorted(bars) == ["in-flight", "parked"]
        assert "2 started since" in page
    with as_(world.url, world.tokens["gail"]) as client:
        page = client.get("/console").text
        assert _counts(page) == {"WAITING": 1}
        assert "<strong>0</strong> open UNKNOWN outcomes" in page
        assert "<strong>0</strong> parked" in page
    with as_(world.url, world.tokens["root"]) as client:
        assert sum(_counts(client.get("/console").text).values()) == 3


def test_a_raised_flag_shows_on_the_home_page(world: World) -> None:
    """Goal: the flagged signal counts open flags by reason, for the flag's tenant.

    Method: raise stuck_lease on acme's waiting instance through the store's owner (the
    scan's write): olga's home page counts 1 flagged, stuck_lease; gail's 0.
    """
    store = open_store(world.url)
    try:
        assert store.raise_flag(instance_id=world.waiting, reason_code="stuck_lease",
                                evidence="{}", detected_by="test", now=1.0)  # fmt: skip
    finally:
        store.close()
    with as_(world.url, world.tokens["olga"]) as client:
        flagged = client.get("/console").text.split('id="signal-flagged"')[1].split("</a>")[0]
        assert "<strong>1</strong> flagged<span>1 stuck_lease</span>" in flagged
    with as_(world.url, world.tokens["gail"]) as client:
        assert "<strong>0</strong> flagged" in client.get("/console").text
