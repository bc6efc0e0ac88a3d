"""The README's Python code runs as written, so the first example a newcomer tries never rots.

Issue 15, item 1: the quickstart had no ``asyncio.run``, its input was not JSON (``[...]``),
and with no worker running ``engine.result`` waited 30 s and failed without saying why. Every
```python block of README.md is saved to a file in an empty folder and run there by a fresh
interpreter, exactly as a reader would run it; it defines its own stand-in participant.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M)
RUN_SECONDS_MAX = 60


def _run(folder: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERFLOW_")}
    return subprocess.run(
        command,
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS_MAX,
        check=False,
    )


def test_the_readme_has_python_to_run() -> None:
    """Goal: the test below has something to check. Method: at least the quickstart block."""
    assert BLOCKS
    assert "asyncio.run(main())" in BLOCKS[0]


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_every_python_block_runs_as_written(index: int, tmp_path: Path) -> None:
    """Goal: each block runs unchanged with the installed package.

    Method: save the block (the first as quickstart.py, as the README says), run it with this
    interpreter in an empty folder: exit 0, nothing on stderr.
    """
    name = "quickstart.py" if index == 0 else f"block_{index}.py"
    (tmp_path / name).write_text(BLOCKS[index], encoding="utf-8")
    done = _run(tmp_path, sys.executable, name)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_the_quickstart_prints_what_the_readme_says_twice(tmp_path: Path) -> None:
    """Goal: the quickstart's output is the one the README shows, a second run returns the same
    recorded result (one business key, one instance), and the worker command its comment names
    works on what it wrote.

    Method: run quickstart.py twice; each run prints exactly the line the README quotes after
    "It prints"; then `ledgerflow worker quickstart:registry --db sqlite:///orders.db
    --until-idle` exits 0.
    """
    (tmp_path / "quickstart.py").write_text(BLOCKS[0], encoding="utf-8")
    match = re.search(r"It prints `([^`]+)`", README.read_text(encoding="utf-8"))
    assert match is not None
    for _ in range(2):
        done = _run(tmp_path, sys.executable, "quickstart.py")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == match.group(1)
    cli = "from ledgerflow.cli.main import main; main()"
    worker = _run(
        tmp_path,
        sys.executable,
        "-c",
        f"import sys; sys.path.insert(0, '.'); {cli}",
        *("worker", "quickstart:registry", "--db", "sqlite:///orders.db", "--until-idle"),
    )
    assert worker.returncode == 0, worker.stderr
