"""The import rules of the layered layout, checked on the source (an AST walk, no imports run).

Every import counts: at module level, inside functions, under `TYPE_CHECKING`, and `from a.b import c`
counts as an import of `a.b` (and of `a.b.c` when that is a module). The rules, from the README:

- `core` never imports `app` or streamlit;
- in `app`, a layer imports only itself and the layers below it:
  views > sections > components > services (then `core`);
- `app.state` (the session keys) is for views and sections only: components and services hold no
  session state;
- nothing imports `app.devtools` (the benchmarks and probes sit on top, beside the entry point);
- no import cycles anywhere in `app` and `core`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"views": 4, "sections": 3, "components": 2, "services": 1}
ENTRY_POINTS = {"app.streamlit_app", "app.bench"}  # may import anything in app


def _modules() -> dict[str, Path]:
    mods = {}
    for top in ("app", "core"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            name = ".".join(rel.parts)
            mods[name.removesuffix(".__init__")] = path
    return mods


MODULES = _modules()


def imported_names(name: str, path: Path) -> set[str]:
    """Every module name an import in this file mentions, resolved like Python resolves it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def _internal(names: set[str]) -> set[str]:
    """The project modules those names refer to (a name inside a module counts as that module)."""
    found = set()
    for n in names:
        while n and n not in MODULES:
            n = n.rpartition(".")[0]
        if n:
            found.add(n)
    return found


IMPORTS = {name: imported_names(name, path) for name, path in MODULES.items()}
EDGES = {name: _internal(names) - {name} for name, names in IMPORTS.items()}


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "app" or len(parts) < 2:
        return None
    return LAYERS.get(parts[1])


def test_the_walk_sees_imports_inside_functions_and_type_checking(tmp_path: Path) -> None:
    src = tmp_path / "mod.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app.services import jobs\n"
                   "def f():\n    import app.state\n    from .sibling import thing\n", encoding="utf-8")
    names = imported_names("app.sections.mod", src)
    assert {"app.services", "app.services.jobs", "app.state", "app.sections.sibling",
            "app.sections.sibling.thing"} <= names


def test_core_never_imports_app_or_streamlit() -> None:
    bad = {m: sorted(n for n in names if n.split(".")[0] in ("app", "streamlit"))
           for m, names in IMPORTS.items() if m.split(".")[0] == "core"}
    assert {m: v for m, v in bad.items() if v} == {}


def test_app_layers_import_only_downward() -> None:
    bad = []
    for module, targets in EDGES.items():
        here = _layer(module)
        if here is None:
            continue
        for target in targets:
            there = _layer(target)
            if there is not None and there > here:
                bad.append(f"{module} -> {target}")
            if target.startswith("app.devtools") or target in ENTRY_POINTS:
                bad.append(f"{module} -> {target}")
    assert bad == []


def test_components_and_services_hold_no_session_state() -> None:
    bad = [f"{m} -> app.state" for m, targets in EDGES.items()
           if _layer(m) in (LAYERS["components"], LAYERS["services"]) and "app.state" in targets]
    assert bad == []


def test_every_app_module_sits_in_a_layer() -> None:
    loose = [m for m in MODULES if m.startswith("app.") and _layer(m) is None
             and m not in ENTRY_POINTS | {"app.state"} and not m.startswith("app.devtools")]
    assert loose == []


def test_no_import_cycles() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in EDGES[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(MODULES):
        if v not in index:
            visit(v)
    assert cycles == []
