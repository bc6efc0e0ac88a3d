"""The HTTP front door: the authenticated, tenant-scoped API under ``/v1`` and the operator
console under ``/console`` (internal).

:func:`create_app` is its one entry point (``ledgerflow serve`` runs it under uvicorn); every
request goes through the operators' service, scoped to the principal that made it, as the
``ledgerflow`` command goes through it. Importing this package needs the ``http`` extra.
"""

from __future__ import annotations

from ledgerflow.web.app import create_app

__all__ = ["create_app"]
