"""The documentation site documents every public name, and its nav holds every page (issue 24).

The API reference (docs/reference/api/) is generated from docstrings by mkdocstrings, one
``::: name`` directive per public name. Nothing generates the directives themselves, so a
name added to a front door without its directive (or without a docstring, which would render
as an empty entry) fails here; a directive for a name no longer public fails too. The strict
build itself (``bash scripts/docs``) runs in ``scripts/test``.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest
import yaml

import ledgerflow
import ledgerflow.errors
import ledgerflow.participant
import ledgerflow.testing
from ledgerflow.errors import LedgerflowError

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
API = DOCS / "reference" / "api"
PAGES = {
    "ledgerflow": API / "ledgerflow.md",
    "ledgerflow.participant": API / "participant.md",
    "ledgerflow.testing": API / "testing.md",
    "ledgerflow.errors": API / "errors.md",
}


def _public(module: ModuleType) -> set[str]:
    if module is ledgerflow.errors:  # no __all__: its public error classes
        return {
            name
            for name, value in vars(module).items()
            if not name.startswith("_")
            and inspect.isclass(value)
            and issubclass(value, LedgerflowError)
        }
    return set(module.__all__)


def _directives(module: str) -> set[str]:
    text = PAGES[module].read_text(encoding="utf-8")
    return set(re.findall(rf"^::: {re.escape(module)}\.(\w+)$", text, re.M))


def _members(value: object) -> list[tuple[str, object]]:
    """A public class's own public methods and properties (what mkdocstrings renders)."""
    if not inspect.isclass(value):
        return []
    found = []
    for name, member in vars(value).items():
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            found.append((name, member.fget))
        elif isinstance(member, classmethod | staticmethod):
            found.append((name, member.__func__))
        elif inspect.isfunction(member):
            found.append((name, member))
    return found


FRONT_DOORS = [ledgerflow, ledgerflow.participant, ledgerflow.testing, ledgerflow.errors]


@pytest.mark.parametrize("module", FRONT_DOORS, ids=lambda m: m.__name__)
def test_every_public_name_has_its_entry_in_the_api_reference(module: ModuleType) -> None:
    """Goal: a public name cannot be missing from the reference, nor the reference keep a
    name that is gone. Method: the ``::: module.Name`` directives of the module's page are
    exactly its public names."""
    documented = _directives(module.__name__)
    public = _public(module)
    assert not public - documented, f"not in {PAGES[module.__name__].name}: {public - documented}"
    assert not documented - public, f"no longer public: {documented - public}"


@pytest.mark.parametrize("module", FRONT_DOORS, ids=lambda m: m.__name__)
def test_every_public_name_and_member_has_a_docstring(module: ModuleType) -> None:
    """Goal: no entry of the reference renders empty. Method: each public name, and each
    public method and property a public class defines, has a docstring of its own."""
    undocumented = []
    for name in sorted(_public(module)):
        value = getattr(module, name)
        if not (inspect.getdoc(value) or "").strip():
            undocumented.append(name)
        for member, function in _members(value):
            if not (getattr(function, "__doc__", None) or "").strip():
                undocumented.append(f"{name}.{member}")
    assert not undocumented, f"{module.__name__}: no docstring: {undocumented}"


def _nav_files(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [f for item in nav for f in _nav_files(item)]
    if isinstance(nav, dict):
        return [f for value in nav.values() for f in _nav_files(value)]
    return []


def test_the_nav_holds_every_page_and_only_pages_that_exist() -> None:
    """Goal: no page of docs/ is left out of the site's navigation (MkDocs only mentions it),
    and the nav names no missing page. Method: the nav's files equal the .md files under
    docs/."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    in_nav = _nav_files(config["nav"])
    assert len(in_nav) == len(set(in_nav))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert set(in_nav) == pages


def _hook(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_roles_hook_renders_sphinx_roles_as_code() -> None:
    """Goal: a docstring's ``:class:`~a.B``` reads as ``B`` on the site, not ":class:B".
    Method: the hook on the HTML mkdocstrings makes of one role of each form, and of an
    example's lead-in ending "::"."""
    roles = _hook("docs_roles")
    html = (
        "<p>Raises :class:<code>~ledgerflow.errors.EffectFailedError</code> or "
        ":meth:<code>Engine.start</code>. Example::</p><p>::</p>\n<pre>tree</pre>"
    )
    assert roles.on_page_content(html) == (
        "<p>Raises <code>EffectFailedError</code> or <code>Engine.start</code>. Example:</p>"
        "<pre>tree</pre>"
    )


def test_the_openapi_hook_renders_every_operation_of_the_app() -> None:
    """Goal: the HTTP reference page holds every operation the app declares. Method: render
    the app's document with the hook; each (method, path) has its heading."""
    openapi = _hook("docs_openapi")
    document = openapi._openapi()
    page = openapi.render(document)
    for path, operations in document["paths"].items():
        for method in operations:
            assert f"### `{method.upper()} {path}`" in page


def test_the_site_fetches_nothing_from_elsewhere() -> None:
    """Goal: the site builds and reads without network access. Method: Material is told not to
    load Google's fonts (``theme.font: false``), and no diagram fence asks for the Mermaid
    script Material would fetch from a CDN (the state machines render as text)."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["theme"]["font"] is False
    assert "custom_fences" not in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def test_the_cli_hook_leaves_no_unset_marker_on_the_cli_page_only() -> None:
    """Goal: the CLI reference shows no ``Sentinel.UNSET`` default (click's marker for "no
    default", which mkdocs-click prints). Method: the hook on a cell of it, on the CLI page
    and on another page."""
    cli = _hook("docs_cli")

    class Page:
        def __init__(self, uri: str) -> None:
            self.file = type("File", (), {"src_uri": uri})()

    cell = "<tr><td><code>--json</code></td><td><code>Sentinel.UNSET</code></td></tr>"
    assert cli.on_page_content(cell, page=Page("reference/cli.md")) == (
        "<tr><td><code>--json</code></td><td></td></tr>"
    )
    assert cli.on_page_content(cell, page=Page("tutorial.md")) == cell
