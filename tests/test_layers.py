"""The layers are a rule: every import in the package goes down the table of layers that
``ledgerflow/__init__.py`` states, and nowhere else.

The table is read from that docstring (the one place it is written), and each module's imports
from its source (``source_imports``), including imports inside functions. Beside the order
itself: the faces import nothing from storage, the runtime is typed against the journal part of
the store seam only, and no two modules import each other, however indirectly.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ledgerflow
from source_imports import Import, imports, module_name, relative, sources

# The foundation's modules may import each other (they are modules, not packages).
FOUNDATION = 0
# A face may import another face only through that face's package front, never its modules.
FACES = {"cli", "web"}
# What a runtime module may name from the store seam: the journal, and the scan's part.
RUNTIME_SEAM = {"JournalStore", "LedgerReads", "DetectionStore"}
# The runtime modules that open a whole store and hand each part its view of it: the two front
# doors, asyncio and blocking.
RUNTIME_COMPOSITION_ROOTS = {"ledgerflow.runtime.engine", "ledgerflow.runtime.sync_engine"}


def layers() -> dict[str, int]:
    """Package (or foundation module) -> its layer, from the front door's docstring."""
    doc = ledgerflow.__doc__ or ""
    table = doc.split("reads the table below and holds every import to it::", 1)[1]
    found: dict[str, int] = {}
    for line in table.split("\n\n", 2)[1].splitlines():
        match = re.fullmatch(r"    (\d)  ([a-z_ ]+)", line)
        assert match, f"not a line of the layer table: {line!r}"
        for name in match.group(2).split():
            found[name] = int(match.group(1))
    return found


LAYERS = layers()


def unit(module: str) -> str:
    """The part of the package a module belongs to: ``runtime`` for ``ledgerflow.runtime.x``,
    ``errors`` for ``ledgerflow.errors``, ``ledgerflow`` for the front door itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _ours(found: Import) -> bool:
    return found.module == "ledgerflow" or found.module.startswith("ledgerflow.")


def violations(path: Path) -> list[str]:
    """Every import of one module against the layer table, in words."""
    module = module_name(path)
    home = unit(module)
    problems: list[str] = []
    for found in filter(_ours, imports(path)):
        there = unit(found.module)
        if there == home:
            continue
        where = f"{relative(path)}:{found.line} imports {found.module}"
        if there not in LAYERS:
            problems.append(f"{where}: {there} has no layer (add it to the table)")
        elif home in FACES and there in FACES:
            if found.module != f"ledgerflow.{there}":
                problems.append(f"{where}: a face reaches another only through its front")
        elif LAYERS[there] > LAYERS[home] or (LAYERS[there] == LAYERS[home] > FOUNDATION):
            relation = "above" if LAYERS[there] > LAYERS[home] else "beside"
            problems.append(
                f"{where}: layer {LAYERS[there]} ({there}) is {relation} layer "
                f"{LAYERS[home]} ({home})"
            )
        if home in FACES and there in ("ledger", "storage"):
            problems.append(f"{where}: a face goes through the engine or the operators' service")
        if home == "runtime" and found.module == "ledgerflow.storage.store":
            beyond = set(found.names) - RUNTIME_SEAM
            if beyond and module not in RUNTIME_COMPOSITION_ROOTS:
                problems.append(f"{where}: the runtime sees only {sorted(RUNTIME_SEAM)}")
    return problems


def test_the_table_names_every_part_of_the_package() -> None:
    """Goal: no package or top-level module is left out of the layers (or named twice).

    Method: every unit of every module under src/ledgerflow has a layer in the table, and the
    table names nothing that does not exist.
    """
    units = {unit(module_name(path)) for path in sources()}
    assert units == set(LAYERS), (sorted(units - set(LAYERS)), sorted(set(LAYERS) - units))
    assert sorted(set(LAYERS.values())) == list(range(9))


@pytest.mark.parametrize("path", sources(), ids=relative)
def test_every_import_goes_down_the_layers(path: Path) -> None:
    """Goal: model -> ledger -> storage -> runtime -> operators -> faces holds for every module.

    Method: each import of another unit names a lower layer (a face may import another face's
    front only); a face imports nothing of storage; the runtime names only the journal's and
    the scan's parts of the store seam (except the engine, which opens the whole store).
    """
    assert violations(path) == []


def test_no_two_modules_import_each_other() -> None:
    """Goal: modules form no cycle, so that each can be read (and moved) before the ones that
    build on it (cli/instances.py and cli/repairs.py once imported each other).

    Method: the graph of imports between modules of the package has no strongly connected
    component of more than one module (Tarjan's algorithm, iteratively).
    """
    graph: dict[str, set[str]] = {}
    for path in sources():
        module = module_name(path)
        graph[module] = {i.module for i in imports(path) if _ours(i) and i.module != module}
    cycles = [component for component in _components(graph) if len(component) > 1]
    assert cycles == []


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            step = next((e for e in edges if e in graph), None)
            if step is not None and step not in index:
                index[step] = low[step] = len(index)
                stack.append(step)
                on_stack.add(step)
                work.append((step, iter(sorted(graph[step]))))
                continue
            if step is not None:
                if step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                found.append(sorted(component))
    return found


def test_the_rule_would_catch_what_it_forbids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: the rule is not vacuous: each kind of wrong import is found.

    Method: check planted modules (a runtime module importing operators, a model module and
    a ledger module importing storage, a face importing storage, the ledger and another face's
    module, a runtime module naming the whole Store) as if they sat in the package.
    """
    import source_imports

    package = tmp_path / "src" / "ledgerflow"
    planted = {
        "runtime/bad.py": "from ledgerflow.operators.service import Operations\n"
        "from ledgerflow.storage.store import Store\n",
        "model/bad.py": "from ledgerflow.storage.store import Store\n",
        "ledger/bad.py": "from ledgerflow.storage.store import Store\n",
        "cli/bad.py": "from ledgerflow.storage import open_store\n"
        "from ledgerflow.ledger.records import Commit\n"
        "from ledgerflow.web.api import create_app\n",
        "participant/bad.py": "from ledgerflow.runtime.engine import Engine\n",
    }
    for name in ("runtime", "model", "ledger", "cli", "participant", "operators", "storage", "web"):
        (package / name).mkdir(parents=True, exist_ok=True)
        (package / name / "__init__.py").write_text("")
    (package / "operators" / "service.py").write_text("")
    (package / "storage" / "store.py").write_text("")
    (package / "ledger" / "records.py").write_text("")
    (package / "web" / "api.py").write_text("")
    (package / "runtime" / "engine.py").write_text("")
    for name, text in planted.items():
        (package / name).write_text(text)
    monkeypatch.setattr(source_imports, "SRC", tmp_path / "src")
    monkeypatch.setattr(source_imports, "PACKAGE", package)
    found = {name: violations(package / name) for name in planted}
    assert any("layer 5 (operators) is above layer 4" in p for p in found["runtime/bad.py"])
    assert any("the runtime sees only" in p for p in found["runtime/bad.py"])
    assert any("layer 3 (storage) is above layer 1" in p for p in found["model/bad.py"])
    assert any("layer 3 (storage) is above layer 2" in p for p in found["ledger/bad.py"])
    assert sum("a face goes through" in p for p in found["cli/bad.py"]) == 2
    assert any("through its front" in p for p in found["cli/bad.py"])
    assert any("is beside layer 4" in p for p in found["participant/bad.py"])
    assert _components({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"], ["d"]]
