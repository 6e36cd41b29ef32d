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
ONCE = {"compute_bound_batch": "core/perf.py", "crossover_tokens": "core/perf.py", "decode_split_s": "core/perf.py",
        "row_sums": "core/cost.py", "decode_time_s": "core/deployment.py", "step_time_s": "core/deployment.py",
        "allreduce_s": "core/deployment.py", "kv_blocks_available": "core/deployment.py"}


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


def _calls(path: Path, name: str) -> int:
    return sum(1 for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
               and getattr(node.func, "id", getattr(node.func, "attr", None)) == name)


def test_the_row_sums_of_a_step_are_added_up_in_one_place():
    """The cost model, the simulator's fitted step time and its event loop all call core.cost.row_sums;
    nowhere else in core adds up attention pairs over rows."""
    for user in ("cost.py", "sim/steptime.py", "sim/engine.py"):
        assert _calls(CORE / user, "row_sums") >= 1, user
    summing = re.compile(r"\bpairs\s*\+=")
    offenders = sorted(p.relative_to(CORE.parent).as_posix() for p in CORE.rglob("*.py")
                       if summing.search(p.read_text()) and p.name != "cost.py")
    assert offenders == []


def test_row_sums_counts_rows_as_repeats_and_holds_a_window():
    from core.cost import RowShape, held_positions, row_sums, step_cost
    from core.spec import load_model_preset

    plain = RowShape(n_layers=4)
    rows = [(3, 10), (1, 50), (1, 0)]
    assert row_sums(plain, rows, counts=[2, 1, 3]) == row_sums(plain, [rows[0]] * 2 + [rows[1]] + [rows[2]] * 3)
    assert row_sums(plain, rows).pairs == 4 * (3 * (10 + 3) + 1 * (50 + 1) + 1 * 1)
    windowed = load_model_preset("gemma-2-9b")
    shape = RowShape.of(windowed)
    assert shape.sliding is not None
    for cached in (0, 100, windowed.sliding_window - 1, windowed.sliding_window + 500):
        assert shape.held(cached) == held_positions(windowed, cached)
    # the cost model's KV read is the row sums' held positions, priced per position
    cost = step_cost(windowed, [(1, 5000), (1, 9000)], kv_dtype="bf16")
    held = row_sums(shape, [(1, 5000), (1, 9000)]).held
    assert cost.bytes["kv_read"] == held * windowed.kv_width * 2
