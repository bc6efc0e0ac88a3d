"""Storage: the one seam between the engine and a database (internal).

:func:`open_store` turns a URL into a :class:`~ledgerflow.storage.store.Store`. Only this
package imports a database driver, and all SQL lives in ``sql/<dialect>/*.sql`` as named blocks.
"""

from __future__ import annotations

from ledgerflow.storage.store import Store
from ledgerflow.storage.url import open_store

__all__ = ["Store", "open_store"]
