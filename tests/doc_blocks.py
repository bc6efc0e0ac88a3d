"""Running the code blocks of a document as a reader would (shared by the README's and the
tutorial's tests).

Issue 15 made the README's Python blocks run as written; issue 24 adds a tutorial whose every
block runs. A block is found by its fence (```python, ```sh...); it runs in an empty folder
by a fresh interpreter or shell, with none of the caller's ``LEDGERFLOW_`` settings, and this
interpreter's ``bin`` first on ``PATH`` (so ``python`` and ``ledgerflow`` are the installed
ones), within a bound.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

RUN_SECONDS_MAX = 60


def blocks(text: str, language: str) -> list[str]:
    """The bodies of the fenced blocks of ``language`` in ``text``, in order."""
    return re.findall(rf"^```{re.escape(language)}\n(.*?)^```", text, re.S | re.M)


def fenced(text: str) -> list[tuple[str, str]]:
    """Every fenced block of ``text`` as (language, body), in order; a block indented under a
    list item is read without its indentation."""
    found = re.findall(r"^( *)```(\w*)\n(.*?)^\1```", text, re.S | re.M)
    return [(language, textwrap.dedent(body)) for _, language, body in found]


def reader_env() -> dict[str, str]:
    """The environment a reader's shell has: no LEDGERFLOW_ setting of the test run, and this
    interpreter's commands first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERFLOW_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run(
    folder: Path, *command: str, seconds: float = RUN_SECONDS_MAX
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        cwd=folder,
        env=reader_env(),
        capture_output=True,
        text=True,
        timeout=seconds,
        check=False,
    )
