"""The import rules of the page-package layout, checked on the source (an AST walk, no imports run).

Every import counts: at module level, inside functions, under `TYPE_CHECKING`, and `from a.b import c`
counts as an import of `a.b` (and of `a.b.c` when that is a module). The rules, from the README:

- `core` never imports `app` or streamlit;
- each page is one package under app/views/ (live, whatif, serving, engines) and imports only itself,
  app.shared and core: no page imports another page;
- app.shared (what two or more pages use) never imports a page;
- only app.shared.session touches `st.session_state` among the shared modules (the keys are the pages');
- nothing imports `app.devtools` or an entry point (the benchmarks and probes sit on top, beside the
  entry point, and may import anything);
- every app module sits in a page, in app.shared or in app.devtools, or is an entry point;
- no import cycles anywhere in `app` and `core`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("live", "whatif", "serving", "engines")
ENTRY_POINTS = {"app.streamlit_app", "app.navigation", "app.bench"}  # may import anything in app
PACKAGES = {"app", "app.views"}  # package docstrings only


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


def _page(module: str) -> str | None:
    """The page a module belongs to (app.views.<page>...), or None."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["app", "views"] and len(parts) > 2 else None


def test_the_walk_sees_imports_inside_functions_and_type_checking(tmp_path: Path) -> None:
    src = tmp_path / "mod.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app.services import jobs\n"
                   "def f():\n    import app.state\n    from .sibling import thing\n", encoding="utf-8")
    names = imported_names("app.views.live.mod", src)
    assert {"app.services", "app.services.jobs", "app.state", "app.views.live.sibling",
            "app.views.live.sibling.thing"} <= names


def test_core_never_imports_app_or_streamlit() -> None:
    bad = {m: sorted(n for n in names if n.split(".")[0] in ("app", "streamlit"))
           for m, names in IMPORTS.items() if m.split(".")[0] == "core"}
    assert {m: v for m, v in bad.items() if v} == {}


def test_every_page_is_a_package_the_router_names() -> None:
    """The four pages, and any page added later: a package under app/views/ with a view module,
    named by an st.Page line of the router."""
    pages = {_page(m) for m in MODULES} - {None}
    assert set(PAGES) <= pages
    router = (ROOT / "app" / "navigation.py").read_text(encoding="utf-8")
    for page in pages:
        assert f"app.views.{page}.view" in MODULES, page
        assert f'_view("{page}")' in router, page


def test_a_page_imports_only_itself_shared_and_core() -> None:
    bad = []
    for module, targets in EDGES.items():
        page = _page(module)
        if page is None:
            continue
        for target in targets:
            if target.startswith("app.") and not (
                    _page(target) == page or target.startswith("app.shared") or target in PACKAGES):
                bad.append(f"{module} -> {target}")
    assert bad == []


def test_shared_never_imports_a_page_devtools_or_an_entry_point() -> None:
    bad = [f"{m} -> {t}" for m, targets in EDGES.items() if m.startswith("app.shared")
           for t in targets if t.startswith("app.") and not t.startswith("app.shared")]
    assert bad == []


def test_nothing_imports_devtools_or_an_entry_point() -> None:
    bad = [f"{m} -> {t}" for m, targets in EDGES.items()
           if not m.startswith("app.devtools") and m not in ENTRY_POINTS
           for t in targets if t.startswith("app.devtools") or t in ENTRY_POINTS]
    assert bad == []


def test_only_the_session_helpers_touch_session_state_in_shared() -> None:
    bad = []
    for module, path in MODULES.items():
        if module.startswith("app.shared") and module != "app.shared.session":
            tree = ast.parse(path.read_text(encoding="utf-8"))
            if any(isinstance(n, ast.Attribute) and n.attr == "session_state" for n in ast.walk(tree)):
                bad.append(module)
    assert bad == []


def test_every_app_module_sits_in_a_page_shared_or_devtools() -> None:
    loose = [m for m in MODULES if m.startswith("app") and _page(m) is None
             and not m.startswith(("app.shared", "app.devtools")) and m not in ENTRY_POINTS | PACKAGES]
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
