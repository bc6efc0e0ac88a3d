"""Runs a synchronous store on one dedicated thread, for the event loop (internal).

One thread per store keeps driver objects off the loop and serialises access to the
connection; every call returns only after the store call (and so any commit) is done.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from ledgerflow.storage.store import Store

T = TypeVar("T")


class AsyncStore:
    """``inline=True`` runs store calls on the event loop's own thread: slower for a service,
    but it makes a simulation's interleaving depend on nothing but its seed."""

    def __init__(self, store: Store, *, inline: bool = False) -> None:
        self.store = store
        self.inline = inline
        self._thread = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="ledgerflow-store"
        )

    async def call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self.inline:
            return method(*args, **kwargs)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, functools.partial(method, *args, **kwargs))

    def close(self) -> None:
        self._thread.shutdown(wait=True)
        self.store.close()
