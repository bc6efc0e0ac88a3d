"""The Python examples of the site's concept and how-to pages run as written (issue 24).

The tutorial and the home page have their own test (tests/test_tutorial.py), which also runs
their shell blocks; on the other pages the shell, TOML and YAML blocks show commands against
the reader's own deployment (a PostgreSQL server, Prometheus, Grafana) and are not run, but
every ```python block is: saved to a file in an empty folder and run by a fresh interpreter,
exit 0 and nothing on stderr. A block whose first line names a ``test_*.py`` file is a test the page
tells the reader to put in their suite, so it is run by pytest, and must pass.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from doc_blocks import fenced, run

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(
    [
        *DOCS.glob("concepts/*.md"),
        *DOCS.glob("how-to/*.md"),
        DOCS / "programming-model.md",
        DOCS / "participants.md",
    ]
)
EXAMPLES = [
    (page, n, body)
    for page in PAGES
    for n, (language, body) in enumerate(
        b for b in fenced(page.read_text(encoding="utf-8")) if b[0] == "python"
    )
]


def test_the_pages_have_examples_to_run() -> None:
    """Goal: the test below checks something on each kind of page. Method: examples are
    found on concept and how-to pages, one of them a test file."""
    assert {page.parent.name for page, _, _ in EXAMPLES} >= {"concepts", "how-to"}
    assert any(body.startswith("# test_") for _, _, body in EXAMPLES)


@pytest.mark.parametrize(
    ("page", "index", "body"),
    EXAMPLES,
    ids=[f"{page.relative_to(DOCS)}-{n}" for page, n, _ in EXAMPLES],
)
def test_every_python_example_runs(page: Path, index: int, body: str, tmp_path: Path) -> None:
    """Goal: each example runs unchanged with the installed package. Method: save it (under
    the file name its first line gives, if any) and run it, or pytest it when it is a test."""
    named = re.match(r"# (\w+\.py)\n", body)
    name = named.group(1) if named else f"example_{index}.py"
    (tmp_path / name).write_text(body, encoding="utf-8")
    if name.startswith("test_"):
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", name]
    else:
        command = [sys.executable, name]
    done = run(tmp_path, *command, seconds=120)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert done.stderr == ""
