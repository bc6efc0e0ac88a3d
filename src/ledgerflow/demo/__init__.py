"""Samples and demonstration fixtures (internal): the demo's order workflow, its fake
participant service with a ledger of its own, and a participant's reservation book."""

from __future__ import annotations
