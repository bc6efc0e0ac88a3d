"""The registry ``ledgerflow check-participant`` is pointed at in the contract-check tests.

One participant, ``pay``, declared with every promise: it deduplicates, answers lookups, has a
compensation and keeps its keys a week. Each test runs the participant service with a spec
that keeps all of them, or breaks one (``pay:lookup`` applies a repeat again, ``lying-lookup``,
``short-window``), and the check must tell which.
"""

from __future__ import annotations

from datetime import timedelta

from ledgerflow import Registry, RetryPolicy
from remote_cast import declare

RETENTION = timedelta(days=7)
registry = Registry()
declare(
    registry,
    "pay:dedupe+lookup",
    operations={"charge": "compensatable"},
    compensations={"charge": "refund"},
    retry=RetryPolicy(attempts_max=3),
    key_retention=RETENTION,
)
