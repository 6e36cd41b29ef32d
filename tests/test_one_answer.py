"""Each analytic the packages issue names is defined once in core, so two pages cannot disagree.

An AST walk over core/ counts the functions of each name; the inline forms they replaced (the
weights-over-KV crossover written out again) are looked for as text.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "core"
ONCE = {"compute_bound_batch": "core/perf.py", "crossover_tokens": "core/perf.py", "decode_split_s": "core/perf.py"}


def _definitions() -> Counter:
    found: Counter = Counter()
    for path in CORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in ONCE:
                found[(node.name, path.relative_to(CORE.parent).as_posix())] += 1
    return found


def test_each_analytic_is_defined_once_where_it_belongs():
    found = _definitions()
    for name, home in ONCE.items():
        places = {where: n for (fn, where), n in found.items() if fn == name}
        assert places == {home: 1}, (name, places)


def test_no_module_writes_the_crossover_out_again():
    inline = re.compile(r'\["weights"\]\s*/\s*\(')
    offenders = [p.relative_to(CORE.parent).as_posix() for p in CORE.rglob("*.py") if inline.search(p.read_text())]
    assert offenders == []


def test_the_simulator_prices_deployments_without_the_what_if_page_module():
    """Deployment pricing lives in core/deployment.py; the page-named core/whatif.py builds the
    what-if answer on it, and nothing serving-related reaches into it."""
    users = [*sorted((CORE / "sim").rglob("*.py")), CORE.parent / "app" / "views" / "serving" / "jobs.py"]
    offenders = []
    for path in users:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "core.whatif" or n.startswith("core.whatif.") for n in names):
                offenders.append(path.relative_to(CORE.parent).as_posix())
            if isinstance(node, ast.ImportFrom) and node.module == "core" and any(a.name == "whatif" for a in node.names):
                offenders.append(path.relative_to(CORE.parent).as_posix())
    assert offenders == []
