"""Debian's Chromium for the console's browser tests, or a clear skip where there is none.

Playwright drives the Chromium Debian ships (``apt-get install chromium``), never a browser
it downloads. ``LEDGERFLOW_TEST_BROWSER`` names the executable; CI sets it (``.ci/run``
installs the package) and then the tests must run: a missing browser fails them. Without the
variable, ``/usr/bin/chromium`` is used when it is there, and the tests are skipped with this
reason when it is not.

Screenshots go to ``$LEDGERFLOW_ARTIFACTS/console`` (CI's output folder), by default
``artifacts/console`` in the checkout (ignored by git).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ENVIRONMENT_VARIABLE = "LEDGERFLOW_TEST_BROWSER"
ARTIFACTS_VARIABLE = "LEDGERFLOW_ARTIFACTS"
DEBIAN_CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[1]
# The flags of a browser that talks to nobody but the server under test.
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ACTION_TIMEOUT_MS = 15_000


def chromium() -> str:
    """The browser to drive, or a skip (a failure where CI said one must be there)."""
    wanted = os.environ.get(ENVIRONMENT_VARIABLE)
    path = wanted or DEBIAN_CHROMIUM
    if wanted and not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"{ENVIRONMENT_VARIABLE}={wanted} is not an executable browser")
    if not wanted and not os.path.isfile(path):
        pytest.skip(
            f"browser tests need Chromium: apt-get install chromium (or set "
            f"{ENVIRONMENT_VARIABLE} to its path); {DEBIAN_CHROMIUM} is not there"
        )
    try:
        import playwright.sync_api  # noqa: F401 - only to know it is installed
    except ImportError:
        if wanted:
            raise
        pytest.skip("browser tests need the playwright package (the dev extra)")
    return path


def artifacts() -> Path:
    folder = Path(os.environ.get(ARTIFACTS_VARIABLE) or ROOT / "artifacts") / "console"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextmanager
def browser_context(user_data_dir: Path) -> Iterator[Any]:
    """A fresh persistent context (its own profile folder) of Debian's Chromium."""
    executable = chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(user_data_dir),
            executable_path=executable,
            headless=True,
            args=LAUNCH_ARGS,
            viewport={"width": 1400, "height": 900},
        )
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        try:
            yield context
        finally:
            context.close()


def sign_in(page: Any, url: str, token: str) -> None:
    """Sign ``page`` in to the console at ``url`` with an API token, through the form."""
    page.goto(f"{url}/console/sign-in")
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/console")


def keep_for_docs(shots: Path, names: list[str]) -> None:
    """With LEDGERFLOW_UPDATE_DOCS=1, the screenshots become docs/console/'s pictures."""
    if os.environ.get("LEDGERFLOW_UPDATE_DOCS") != "1":
        return
    target = ROOT / "docs" / "console"
    target.mkdir(exist_ok=True)
    for name in names:
        shutil.copyfile(shots / name, target / name)
