"""Silencing one logger for the length of a block, when what it says is said better elsewhere
(internal).

Used where a library's or Ledgerflow's own log lines would only repeat, many times over, what
one error or one verdict already reports: psycopg's pool retrying a connection that the store
has already refused with its cause, the engine's expected errors in a simulated crash.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def muted(name: str) -> Iterator[None]:
    """Nothing below CRITICAL from logger ``name`` (and its children) inside the block."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)
