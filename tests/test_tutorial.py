"""The tutorial (docs/tutorial.md) runs as written, block after block (issue 24).

Every fenced block of the page is one of: a Python file (its first line ``# NAME.py`` names
it; a second block naming the same file continues it, as the page says), a shell block (all
of them, in order, are one terminal session in the folder of those files), or a ``text``
block (what the shell block before it prints: each of its lines must appear in the session's
output, in order, spaces aside). Any other block fails the test: a block nobody runs is a
block that can rot. The site's home page is read the same way.
"""

from __future__ import annotations

from pathlib import Path

from doc_blocks import run_session, session_of

DOCS = Path(__file__).resolve().parents[1] / "docs"
TUTORIAL = DOCS / "tutorial.md"
SESSION_SECONDS_MAX = 180


def test_the_tutorial_has_every_kind_of_block() -> None:
    """Goal: the test below runs the whole page. Method: the page has its files (the shop in
    several blocks), several shell blocks and their outputs."""
    session = session_of(TUTORIAL.read_text(encoding="utf-8"))
    assert {"services.py", "shop.py", "place.py", "status.py", "approve.py"} <= set(session.files)
    assert session.files["shop.py"].count("# shop.py") == 4
    assert len(session.shell) >= 5
    assert len(session.expected) >= 5


def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    """Goal: every block of the tutorial runs, and prints what the page says it prints.

    Method: write its files into an empty folder, run its shell blocks as one bash session
    there (any failing command fails it; background workers are killed when it ends); it
    exits 0 and each line of each text block appears in its output, in the page's order.
    """
    session = session_of(TUTORIAL.read_text(encoding="utf-8"))
    run_session(session, tmp_path, seconds=SESSION_SECONDS_MAX)


def test_the_home_page_example_runs_as_written(tmp_path: Path) -> None:
    """Goal: the first example a visitor of the site sees runs. Method: as the tutorial: its
    shop.py, its commands (start, a worker until idle, the listing) and what they print."""
    session = session_of((DOCS / "index.md").read_text(encoding="utf-8"))
    assert set(session.files) == {"shop.py"}
    run_session(session, tmp_path, seconds=SESSION_SECONDS_MAX)
