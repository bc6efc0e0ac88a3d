"""Demonstration and test fixtures: fake participant services (internal)."""

from __future__ import annotations
