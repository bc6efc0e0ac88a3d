"""The tutorial (docs/tutorial.md) runs as written, block after block (issue 24).

Every fenced block of the page is one of: a Python file (its first line ``# NAME.py`` names
it; a second block naming the same file continues it, as the page says), a shell block (all
of them, in order, are one terminal session in the folder of those files), or a ``text``
block (what the shell block before it prints: each of its lines must appear in the session's
output, in order, spaces aside). Any other block fails the test: a block nobody runs is a
block that can rot.
"""

from __future__ import annotations

import re
from pathlib import Path

from doc_blocks import fenced, run

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "tutorial.md"
SESSION_SECONDS_MAX = 180


def _spaced(line: str) -> str:
    return " ".join(line.split())


def _split(text: str) -> tuple[dict[str, str], list[str], list[list[str]]]:
    files: dict[str, str] = {}
    shell: list[str] = []
    expected: list[list[str]] = []
    for language, body in fenced(text):
        if language == "python":
            name = re.match(r"# (\w+\.py)\n", body)
            assert name is not None, f"a python block names no file: {body[:60]!r}"
            assert not shell, f"{name.group(1)} is written after the session began"
            files[name.group(1)] = files.get(name.group(1), "") + body
        elif language == "sh":
            shell.append(body)
        elif language == "text":
            assert shell, "a text block before any shell block"
            expected.append([_spaced(line) for line in body.splitlines() if line.strip()])
        else:
            raise AssertionError(f"a ```{language} block the test does not run: {body[:60]!r}")
    return files, shell, expected


def test_the_tutorial_has_every_kind_of_block() -> None:
    """Goal: the test below runs the whole page. Method: the page has its files (the shop in
    several blocks), several shell blocks and their outputs."""
    files, shell, expected = _split(TUTORIAL.read_text(encoding="utf-8"))
    assert {"services.py", "shop.py", "place.py", "status.py", "approve.py"} <= set(files)
    assert files["shop.py"].count("# shop.py") == 4
    assert len(shell) >= 5
    assert len(expected) >= 5


def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    """Goal: every block of the tutorial runs, and prints what the page says it prints.

    Method: write its files into an empty folder, run its shell blocks as one bash session
    there (``set -euo pipefail``: any failing command fails it; background workers are killed
    when it ends, however it ends); it exits 0 and each line of each text block appears in
    its output, in the page's order.
    """
    files, shell, expected = _split(TUTORIAL.read_text(encoding="utf-8"))
    for name, body in files.items():
        (tmp_path / name).write_text(body, encoding="utf-8")
    session = "\n".join(
        ["set -euo pipefail", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT", *shell]
    )
    done = run(tmp_path, "bash", "-c", session, seconds=SESSION_SECONDS_MAX)
    log = tmp_path / "worker.log"
    workers = log.read_text(encoding="utf-8") if log.exists() else ""
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{workers}"
    printed = [_spaced(line) for line in done.stdout.splitlines()]
    at = 0
    for lines in expected:
        for line in lines:
            found = next((i for i in range(at, len(printed)) if line in printed[i]), None)
            assert found is not None, f"{line!r} is not printed (after line {at}):\n{done.stdout}"
            at = found + 1
