"""The store's calls are declared once, by the store: the event loop's view of it
(:class:`~ledgerflow.runtime.store_thread.AsyncStore`) forwards each by name, with the
store's own signature, on the store's thread."""

from __future__ import annotations

import asyncio
import inspect
import threading
from pathlib import Path

from ledgerflow.runtime.store_thread import AsyncStore, _OnStoreThread
from ledgerflow.storage import open_store
from ledgerflow.storage.store import JournalStore


def _forwarded() -> dict[str, _OnStoreThread[..., object]]:
    return {
        name: value for name, value in vars(AsyncStore).items() if isinstance(value, _OnStoreThread)
    }


def test_every_forwarded_call_is_the_stores_own() -> None:
    """Goal: each forwarded call names a method of the journal's seam, under its own name,
    so that its signature is the seam's (mypy reads it from there)."""
    forwarded = _forwarded()
    assert len(forwarded) >= 10
    for name, descriptor in forwarded.items():
        assert descriptor.name == name
        assert callable(getattr(JournalStore, name, None)), name
        assert descriptor.__doc__ == getattr(JournalStore, name).__doc__


def test_a_forwarded_call_runs_on_the_store_thread(tmp_path: Path) -> None:
    """Goal: a forwarded call is the store's method, run on the store's one thread with the
    arguments given."""
    store = open_store(f"sqlite:///{tmp_path}/journal.db")
    seen: list[str] = []
    requests = store.cancel_requests

    def cancel_requests(**kwargs: object) -> list[str]:
        seen.append(threading.current_thread().name)
        assert kwargs == {"owner": "w-1"}
        return requests(owner="w-1")  # type: ignore[arg-type]

    store.cancel_requests = cancel_requests  # type: ignore[method-assign]
    thread = AsyncStore(store)
    try:
        assert asyncio.run(thread.cancel_requests(owner="w-1")) == []  # type: ignore[arg-type]
    finally:
        thread.close()
    assert len(seen) == 1
    assert seen[0].startswith("ledgerflow-store")
    assert inspect.iscoroutinefunction(thread.cancel_requests)


def _parameters(function: object) -> list[tuple[str, object, object]]:
    signature = inspect.signature(function)  # type: ignore[arg-type]
    return [
        (p.name, p.kind, p.annotation) for p in signature.parameters.values() if p.name != "self"
    ]


def test_the_sessions_view_of_the_store_is_the_stores_own() -> None:
    """Goal: what a session asks of its store (SessionStore) is declared by the store: each
    call has the journal seam's parameters (forwarded by AsyncStore, or AsyncStore's own
    grouped call), and the replay check's sealed store answers every one of them."""
    from ledgerflow.runtime.replay import SealedStore
    from ledgerflow.runtime.session import SessionStore

    calls = [
        name
        for name, value in vars(SessionStore).items()
        if callable(value) and not name.startswith("_")
    ]
    assert set(calls) >= {"commit", "pending_deliveries", "deliver"}
    forwarded = _forwarded()
    for name in calls:
        declared = _parameters(getattr(SessionStore, name))
        if name in forwarded:
            assert declared == _parameters(getattr(JournalStore, name)), name
        else:
            assert declared == _parameters(getattr(AsyncStore, name)), name
        assert inspect.iscoroutinefunction(getattr(SealedStore, name)), name
