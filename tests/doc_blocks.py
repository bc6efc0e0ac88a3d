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
from dataclasses import dataclass, field
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


def spaced(line: str) -> str:
    return " ".join(line.split())


@dataclass
class Session:
    """A page read as a terminal session: the files its Python blocks write (a first line
    ``# NAME.py`` names each; a second block of the same name continues it), its shell blocks
    in order, and after each ``text`` block the lines that shell prints."""

    files: dict[str, str] = field(default_factory=dict)
    shell: list[str] = field(default_factory=list)
    expected: list[list[str]] = field(default_factory=list)


def session_of(text: str) -> Session:
    """The session a page describes; any other kind of block fails (a block nobody runs)."""
    session = Session()
    for language, body in fenced(text):
        if language == "python":
            name = re.match(r"# (\w+\.py)\n", body)
            assert name is not None, f"a python block names no file: {body[:60]!r}"
            assert not session.shell, f"{name.group(1)} is written after the session began"
            session.files[name.group(1)] = session.files.get(name.group(1), "") + body
        elif language == "sh":
            session.shell.append(body)
        elif language == "text":
            assert session.shell, "a text block before any shell block"
            lines = [spaced(line) for line in body.splitlines() if line.strip()]
            session.expected.append(lines)
        else:
            raise AssertionError(f"a ```{language} block the test does not run: {body[:60]!r}")
    return session


def run_session(session: Session, folder: Path, *, seconds: float) -> None:
    """Write the session's files into ``folder`` and run its shell blocks there as one bash
    session (``set -euo pipefail``; background jobs killed when it ends, however it ends):
    it must exit 0 and print each expected line, in order, spaces aside."""
    for name, body in session.files.items():
        (folder / name).write_text(body, encoding="utf-8")
    script = "\n".join(
        ["set -euo pipefail", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT", *session.shell]
    )
    done = run(folder, "bash", "-c", script, seconds=seconds)
    log = folder / "worker.log"
    workers = log.read_text(encoding="utf-8") if log.exists() else ""
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{workers}"
    printed = [spaced(line) for line in done.stdout.splitlines()]
    at = 0
    for lines in session.expected:
        for line in lines:
            found = next((i for i in range(at, len(printed)) if line in printed[i]), None)
            assert found is not None, f"{line!r} is not printed (after line {at}):\n{done.stdout}"
            at = found + 1
