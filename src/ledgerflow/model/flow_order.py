"""Flow control on effects: the order in which a limit's waiters are admitted, by priority and
weighted fairness between keys (internal; the limits themselves are in
:mod:`ledgerflow.model.flow`).

Among the attempts waiting THROTTLED under one limit's flow key, the next admission goes to
the first by :func:`order_key`:

1. **Priority**, higher first: a level from :data:`PRIORITY_LOWEST` (1) to
   :data:`PRIORITY_HIGHEST` (5), :data:`PRIORITY_DEFAULT` (3) unless the call or the effect's
   declaration says otherwise. Strict: while a key has higher-priority waiters, no lower one is
   admitted, so sustained high-priority load that uses the whole limit holds the lower levels
   back for as long as it lasts (give such load its own operation, or a fairness key).
2. **Weighted fairness** (a limit declared ``fair_by=``): start-time fair queueing. Each
   fairness key ``k`` (a tenant, or a value of the input) with weight ``w_k`` keeps the finish
   tag ``F_k`` of its latest waiter; the flow key keeps a virtual time ``V``, the tag of the
   latest admission. An attempt's first ask takes the tag ``S = max(V, F_k)`` and sets
   ``F_k = S + 1 / w_k``; waiters are admitted by smallest tag (``V`` never passes the
   smallest tag still waiting). Over any run of admissions
   during which fairness keys ``a`` and ``b`` both have waiters (of one priority), their
   admissions ``W_a``, ``W_b`` satisfy ``|W_a / w_a - W_b / w_b| <= 1 / w_a + 1 / w_b``
   (Goyal, Vin and Cheng's bound for SFQ, with every admission costing one), so a key with
   1,000 waiting effects and one with 5 are admitted alternately at equal weights. Without
   ``fair_by`` every waiter has one fairness key and tags grow by one per arrival: first come,
   first served.
3. **Arrival**: when it first asked, then its effect id.

With a rate, the order is that of the slots waiters reserve (a newcomer that comes before
others takes the first of their slots and theirs move one interval later). Waiters whose slots
are due at once ask again one interval apart, in order, and the next grant waits for the first
of them, except among waiters of one priority and one fairness key, which take a free grant in
whichever order they ask (the rate is not left unused while one worker is slow; their slots
keep them in arrival order to within how late they wake). A waiter whose worker has not asked
again for :data:`WAITER_STALE_SECONDS` past the time it was told to (a dead or stalled process)
is not waited for: it keeps its place for when it asks again, and the admission that passed it
over says so (``passed_over``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

PRIORITY_LOWEST = 1
PRIORITY_HIGHEST = 5
PRIORITY_DEFAULT = 3
# A waiter told to ask again at retry_at and still silent this long after is passed over (its
# worker is dead or stalled; a loaded store delays asks by a few hundred milliseconds).
WAITER_STALE_SECONDS = 2.0
# Every effect of a limit without fair_by shares this fairness key.
ONE_FAIRNESS_KEY = "*"


def checked_priority(value: object, *, what: str) -> int:
    """A priority level, or ValueError saying which levels there are."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what}: priority is an integer level, got {value!r}")
    if not PRIORITY_LOWEST <= value <= PRIORITY_HIGHEST:
        raise ValueError(
            f"{what}: priority is {PRIORITY_LOWEST} (lowest) to {PRIORITY_HIGHEST} (highest), "
            f"got {value}"
        )
    return value


def checked_weights(weights: object, *, what: str) -> dict[str, float]:
    if weights is None:
        return {}
    if not isinstance(weights, Mapping):
        raise ValueError(f"{what}: weights maps fairness keys to weights, got {weights!r}")
    checked: dict[str, float] = {}
    for key, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight > 0:
            raise ValueError(f"{what}: the weight of {key!r} must be a number > 0, got {weight!r}")
        checked[str(key)] = float(weight)
    return checked


@dataclass(frozen=True, slots=True)
class Waiter:
    """One THROTTLED attempt, as its order needs it (``slot``: the rate slot it holds)."""

    effect_id: str
    attempt: int
    priority: int
    tag: float
    since: float
    retry_at: float | None
    slot: float | None = None
    fairness_key: str = ONE_FAIRNESS_KEY


def order_key(w: Waiter) -> tuple[float, float, float, str, int]:
    """Priority (higher first), then fairness tag, then arrival (see module)."""
    return (-w.priority, w.tag, w.since, w.effect_id, w.attempt)


@dataclass(frozen=True, slots=True)
class Standing:
    """Where one attempt stands among its key's other waiters of another priority or fairness
    key: how many live ones come before it, how many of those hold a slot already due (and how
    many of these have a higher priority), how many before it are silent too long; and the
    first slot held by any waiter after it (None: none)."""

    ahead: int = 0
    due_ahead: int = 0
    due_higher: int = 0
    silent: int = 0
    behind_slot: float | None = None
    # The smallest fairness tag still waiting (live): the key's virtual time never passes it,
    # though waiters of one kind may be admitted out of tag order.
    least_tag: float | None = None

    def vtime_after(self, vtime: float, tag: float) -> float:
        """The key's virtual time once this waiter (of ``tag``) is admitted."""
        waiting = tag if self.least_tag is None else min(tag, self.least_tag)
        return max(vtime, waiting)


def standing(me: Waiter, waiters: Iterable[Waiter], *, now: float) -> Standing:
    mine = order_key(me)
    ahead = due = higher = silent = 0
    behind: float | None = None
    least: float | None = None
    for w in waiters:
        if (w.effect_id, w.attempt) == (me.effect_id, me.attempt):
            continue
        live = w.retry_at is None or w.retry_at >= now - WAITER_STALE_SECONDS
        if live and (least is None or w.tag < least):
            least = w.tag
        if not order_key(w) < mine:
            if w.slot is not None and (behind is None or w.slot < behind):
                behind = w.slot
            continue
        if w.priority == me.priority and w.fairness_key == me.fairness_key:
            # Its own kind: whichever of them asks first when a grant is free takes it (their
            # slots keep them in arrival order to within how late their workers wake).
            continue
        if not live:
            silent += 1
            continue
        ahead += 1
        if w.slot is not None and w.slot <= now:
            due += 1
            higher += w.priority > me.priority
    return Standing(
        ahead=ahead, due_ahead=due, due_higher=higher, silent=silent, behind_slot=behind,
        least_tag=least,
    )  # fmt: skip


def start_tag(*, vtime: float, finish: float | None, weight: float) -> tuple[float, float]:
    """A new waiter's tag and its fairness key's next finish tag (SFQ, see module)."""
    tag = vtime if finish is None else max(vtime, finish)
    return tag, tag + 1.0 / weight


def fairness_bound(weight_a: float, weight_b: float) -> float:
    """The documented bound on ``|W_a / w_a - W_b / w_b|`` while both keys wait."""
    return 1.0 / weight_a + 1.0 / weight_b
