"""core.settings: the one reader of the environment, and the public limits it defines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from core import settings

ROOT = Path(__file__).resolve().parent.parent


def _is_os_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ"
            and isinstance(node.value, ast.Name) and node.value.id == "os")


def _is_read(node: ast.AST) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        f = node.func
        return (f.attr == "get" and _is_os_environ(f.value)) or (
            f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os")
    if isinstance(node, ast.Subscript):
        return isinstance(node.ctx, ast.Load) and _is_os_environ(node.value)
    if isinstance(node, ast.Compare):
        return any(_is_os_environ(c) for c in node.comparators)
    return False


def env_reads(path: Path) -> list[int]:
    """Lines with `os.environ.get(...)`, `os.getenv(...)`, `os.environ[...]` or `... in os.environ`.

    Writes (`os.environ[k] = v`, setdefault, pop) and whole copies for a child process
    (`{**os.environ}`) are not reads of a setting, so they are allowed anywhere.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sorted(node.lineno for node in ast.walk(tree) if _is_read(node))


def test_the_scan_sees_every_kind_of_read(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text("import os\na = os.environ.get('A')\nb = os.getenv('B')\nc = os.environ['C']\n"
                   "d = 'D' in os.environ\nos.environ['E'] = '1'\nos.environ.setdefault('F', '1')\n"
                   "env = {**os.environ}\n", encoding="utf-8")
    assert env_reads(src) == [2, 3, 4, 5]


def test_only_core_settings_reads_the_environment():
    allowed = ROOT / "core" / "settings.py"
    reads = [f"{path.relative_to(ROOT)}:{line}" for top in ("app", "core")
             for path in sorted((ROOT / top).rglob("*.py")) if path != allowed for line in env_reads(path)]
    assert reads == []


@pytest.mark.parametrize("raw, expected", [(None, 1024), ("4000", 4000), ("5", 16), ("99999", 8192),
                                           ("lots", 1024)])
def test_max_prompt_tokens_is_clamped(monkeypatch, raw, expected):
    if raw is None:
        monkeypatch.delenv("PDLAB_MAX_PROMPT_TOKENS", raising=False)
    else:
        monkeypatch.setenv("PDLAB_MAX_PROMPT_TOKENS", raw)
    assert settings.max_prompt_tokens() == expected


@pytest.mark.parametrize("raw, expected", [(None, 256), ("64", 64), ("0", 1), ("1000", 256), ("", 256)])
def test_max_new_tokens_is_clamped_to_what_a_link_may_ask(monkeypatch, raw, expected):
    if raw is None:
        monkeypatch.delenv("PDLAB_MAX_NEW_TOKENS", raising=False)
    else:
        monkeypatch.setenv("PDLAB_MAX_NEW_TOKENS", raw)
    assert settings.max_new_tokens() == expected <= settings.PUBLIC_MAX_NEW_TOKENS


@pytest.mark.parametrize("raw, expected", [(None, 20), ("3", 3), ("0", 1), ("-5", 1), ("many", 20)])
def test_runs_per_minute(monkeypatch, raw, expected):
    if raw is None:
        monkeypatch.delenv("PDLAB_RUNS_PER_MINUTE", raising=False)
    else:
        monkeypatch.setenv("PDLAB_RUNS_PER_MINUTE", raw)
    assert settings.runs_per_minute() == expected


def test_switches_and_paths(monkeypatch):
    for name in ("PDLAB_BENCH_LOG", "PDLAB_FORCE_REPLAY_WAIT", "PDLAB_CHROMIUM"):
        monkeypatch.delenv(name, raising=False)
    assert not settings.bench_log() and not settings.force_replay_wait()
    assert settings.chromium_path() == "/usr/bin/chromium"
    monkeypatch.setenv("PDLAB_BENCH_LOG", "1")
    monkeypatch.setenv("PDLAB_FORCE_REPLAY_WAIT", "1")
    monkeypatch.setenv("PDLAB_CHROMIUM", "/opt/chromium")
    assert settings.bench_log() and settings.force_replay_wait()
    assert settings.chromium_path() == "/opt/chromium"


def test_the_two_prompt_limits_are_distinct():
    # The box takes a long paste; a link carries less, since the whole prompt travels in the URL.
    assert settings.PROMPT_BOX_MAX_CHARS == 8000 and settings.LINK_PROMPT_MAX_CHARS == 4000
