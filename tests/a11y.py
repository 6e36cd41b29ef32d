"""axe-core in the page: the WCAG 2 A and AA rules run inside Chromium on what the reader sees.

axe-core comes from npm at the version package-lock.json pins (make installs it into node_modules/);
it is injected as a script tag, run once, and its violations returned as plain dicts.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ARTIFACTS, ROOT

AXE_JS = ROOT / "node_modules" / "axe-core" / "axe.min.js"
TAGS = ("wcag2a", "wcag2aa")
BLOCKING = ("serious", "critical")


def axe_violations(page, impacts: tuple[str, ...] = BLOCKING) -> list[dict]:
    """The page's axe violations of those impacts: rule id, impact, help and the failing nodes."""
    if not AXE_JS.exists():
        raise AssertionError(f"{AXE_JS} missing: run `make test` (it installs axe-core with npm ci)")
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(content=Path(AXE_JS).read_text(encoding="utf-8"))
    result = page.evaluate(
        """async (tags) => {
            const r = await axe.run(document, {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']});
            return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.map(n => ({target: n.target.join(' '), impact: n.impact,
                                          summary: (n.failureSummary || '').slice(0, 300),
                                          html: n.html.slice(0, 200)}))}));
        }""", list(TAGS))
    return [v for v in result if v["impact"] in impacts]


def describe(violations: list[dict]) -> str:
    """One line per failing node, for an assertion message a developer can act on."""
    lines = []
    for v in violations:
        for n in v["nodes"]:
            lines.append(f"{v['impact']} {v['id']}: {n['target'][-80:]} :: {n['summary']} :: {n['html']}")
    return "\n".join(lines)


def assert_clean(page, name: str) -> None:
    """No serious or critical WCAG 2 A/AA violation on the page, with a full-page screenshot kept."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"a11y-{name}.png"), full_page=True)
    found = axe_violations(page)
    assert not found, f"{name}: axe found serious or critical WCAG 2 A/AA violations:\n{describe(found)}"
    assert page.locator("[data-testid=stException]").count() == 0
