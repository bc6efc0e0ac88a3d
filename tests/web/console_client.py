"""A console signed in over a real journal, for the tests of the console's pages (in-process,
Starlette's TestClient): a token is made on the journal and signed in through the form."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from starlette.exceptions import StarletteDeprecationWarning

from ledgerflow.operators.service import Operations
from ledgerflow.web import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient


def csrf_of(page: str) -> str:
    """The CSRF token a page's forms carry."""
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, page[:2000]
    return found.group(1)


@contextmanager
def signed_in(url: str, *, role: str = "admin", tenant: str = "*") -> Iterator[TestClient]:
    """A client of the console over ``url`` (created if need be), signed in with a new token
    of ``role``."""
    with Operations(url, migrate=None) as operations:
        token, _ = operations.tokens().create(
            name=f"console-{role}", role=role, tenant=tenant, created_by="test"
        )
    with TestClient(create_app(url), follow_redirects=False) as client:
        form = client.get("/console/sign-in")
        done = client.post("/console/sign-in", data={"token": token, "csrf": csrf_of(form.text)})
        assert done.status_code == 303, done.text
        yield client


@contextmanager
def signed_in_with(url: str, token: str) -> Iterator[TestClient]:
    """A client of the console over ``url``, signed in with an existing ``token``."""
    with TestClient(create_app(url), follow_redirects=False) as client:
        form = client.get("/console/sign-in")
        done = client.post("/console/sign-in", data={"token": token, "csrf": csrf_of(form.text)})
        assert done.status_code == 303, done.text
        yield client
