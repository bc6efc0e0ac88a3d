"""The loader of named SQL blocks: a dialect's queries are its own folder's and the portable ones.

Each test writes a small tree of ``.sql`` files (``portable/`` beside one dialect's folder) and
loads it with ``queries.load_tree``, the function ``queries.load`` runs on the package's tree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ledgerflow.storage import queries


def _tree(root: Path, files: dict[str, str]) -> Path:
    """Writes ``{"folder/file.sql": text}`` under root and returns root."""
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize(
    ("dialect", "expected"),
    [
        (
            "sqlite",
            {
                "get_thing": "SELECT * FROM things WHERE id = :id",
                "thing_named": "SELECT * FROM things WHERE name = :name",
            },
        ),
        (
            "postgres",
            {
                "get_thing": "SELECT * FROM things WHERE id = %(id)s",
                "thing_named": "SELECT * FROM things WHERE name = %(name)s",
            },
        ),
    ],
)
def test_a_dialect_gets_its_own_and_the_portable_queries(
    tmp_path: Path, dialect: str, expected: dict[str, str]
) -> None:
    """Goal: a query written once in portable/ runs in every dialect, next to the dialect's own,
    and reaches PostgreSQL's driver as ``%(name)s`` like PostgreSQL's own blocks (every file
    writes ``:name``).

    Method: a portable block and a dialect block, each with a comment line, and a non-.sql file
    beside them; load the dialect: both names, the statements without their comments and final
    semicolon, placeholders converted for postgres only, the other file ignored.
    """
    root = _tree(
        tmp_path,
        {
            "portable/things.sql": "-- Things.\n\n-- name: get_thing\n-- One thing.\n"
            "SELECT * FROM things WHERE id = :id;\n",
            f"{dialect}/things.sql": "-- name: thing_named\n-- By name.\n"
            "SELECT * FROM things WHERE name = :name;\n",
            f"{dialect}/notes.txt": "-- name: not_a_query\nSELECT 2;\n",
        },
    )
    assert queries.load_tree(root, dialect) == expected


def test_a_name_in_portable_and_in_a_dialect_is_refused(tmp_path: Path) -> None:
    """Goal: a query has one text per dialect: a dialect cannot silently shadow a portable block
    (nor the other way round), whichever file of either folder holds it.

    Method: the same name in portable/a.sql and sqlite/b.sql; loading sqlite raises a
    ValueError that names the query and both folders.
    """
    root = _tree(
        tmp_path,
        {
            "portable/a.sql": "-- name: get_thing\nSELECT 1;\n",
            "sqlite/b.sql": "-- name: get_thing\nSELECT 2;\n",
        },
    )
    with pytest.raises(ValueError, match=r"get_thing .*both portable and sqlite"):
        queries.load_tree(root, "sqlite")


def test_a_name_twice_in_one_folder_is_refused(tmp_path: Path) -> None:
    """Goal: as before portable/ existed, a name defined twice is an error, not the later one
    silently winning: in one file, or in two files of portable/ or of a dialect.

    Method: three trees, each with one such repeat; loading raises a ValueError naming it.
    """
    once = "-- name: get_thing\nSELECT 1;\n"
    cases = {
        "one file": ({"sqlite/a.sql": once + once, "portable/b.sql": ""}, "defined twice"),
        "portable": (
            {"portable/a.sql": once, "portable/b.sql": once, "sqlite/c.sql": ""},
            "two files of portable",
        ),
        "dialect": (
            {"sqlite/a.sql": once, "sqlite/b.sql": once, "portable/c.sql": ""},
            "two files of sqlite",
        ),
    }
    for case, (files, message) in cases.items():
        root = _tree(tmp_path / case.replace(" ", "_"), files)
        with pytest.raises(ValueError, match=rf"get_thing .*{message}"):
            queries.load_tree(root, "sqlite")


def test_portable_is_no_dialect(tmp_path: Path) -> None:
    """Goal: the shared folder cannot be loaded as if it were a dialect (which would hand a
    store every portable query twice over, or none of its dialect's own).

    Method: load_tree(root, "portable") raises a ValueError.
    """
    root = _tree(tmp_path, {"portable/a.sql": "-- name: get_thing\nSELECT 1;\n"})
    with pytest.raises(ValueError, match="no dialect"):
        queries.load_tree(root, queries.PORTABLE)


def test_the_package_tree_gives_each_dialect_its_own_and_the_portable_blocks() -> None:
    """Goal: the packaged SQL resolves through the shared folder: a dialect's store gets a query
    only portable/ writes and one its dialect writes its own way.

    Method: ``insert_token`` is written once (portable/access.sql); ``lock_tokens`` per dialect
    (a table lock in PostgreSQL, nothing in SQLite). Load both dialects.
    """
    for dialect in ("sqlite", "postgres"):
        loaded = queries.load(dialect)
        assert loaded["insert_token"].startswith("INSERT INTO lf_api_tokens"), dialect
    assert queries.load("sqlite")["lock_tokens"] == "SELECT 1"
    assert queries.load("postgres")["lock_tokens"].startswith("LOCK TABLE lf_api_tokens")
    assert ":token_id" in queries.load("sqlite")["insert_token"]
    assert "%(token_id)s" in queries.load("postgres")["insert_token"]
