"""Participants of the test service, declared with the promises the service keeps.

The participant service (``python -m ledgerflow.demo.service``, see ``processes``) hosts each
participant from a spec, ``name:promises``: ``lookup`` (it answers a lookup by key), ``dedupe``
(it applies a key once, however often it is sent), both (``dedupe+lookup``), or ``none``. A
workflow module declares the same participant from the same spec with :func:`declare`, so the
engine relies on exactly the promises the service keeps when it settles an UNKNOWN outcome.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ledgerflow import Participant, Registry, RetryPolicy
from ledgerflow.participant import remote_participant

SERVICE_URL_VARIABLE = "LEDGERFLOW_TEST_SERVICE_URL"
# Where nothing listens: a workflow module imported outside a test (to be read, say).
NOWHERE = "http://127.0.0.1:9"
PROMISES = frozenset({"lookup", "dedupe", "none"})


def service_url() -> str:
    """The service a worker process was started against (``processes.Workers``)."""
    return os.environ.get(SERVICE_URL_VARIABLE, NOWHERE)


def declare(
    registry: Registry,
    spec: str,
    *,
    operations: Mapping[str, str],
    retry: RetryPolicy,
    url: str | None = None,
    **options: Any,
) -> Participant:
    """Add the participant ``spec`` names to ``registry``, served at ``url`` (default: the
    test's service), with ``operations`` (name -> classification) and any other option of
    :func:`~ledgerflow.participant.remote_participant` (compensations, timeouts...)."""
    name, _, promises = spec.partition(":")
    kept = set(promises.split("+"))
    assert kept <= PROMISES, f"unknown promise in {spec!r}"
    return registry.add_participant(
        remote_participant(
            name,
            url or service_url(),
            operations=operations,
            deduplicates="dedupe" in kept,
            has_lookup="lookup" in kept,
            retry=retry,
            **options,
        )
    )
