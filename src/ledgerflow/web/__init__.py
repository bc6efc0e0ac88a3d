"""The HTTP front door: signal, callback and approval delivery, and instance reads (internal).

:func:`create_app` is its one entry point (``ledgerflow serve`` runs it under uvicorn); it
calls the operators' service, as the ``ledgerflow`` command does. Importing this package needs
the ``http`` extra (Starlette).
"""

from __future__ import annotations

from ledgerflow.web.api import create_app

__all__ = ["create_app"]
