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


# axe leaves text outside the viewport "incomplete" for colour contrast (it cannot see what lies
# behind it), so a chart note below the fold passed unchecked until a layout change moved it into
# view. The check runs with the window as tall as the page (capped), so every element is in view.
TALLEST_VIEW = 16_000


def _whole_page_in_view(page) -> dict | None:
    """Grow the window to the page's height; returns the old size to restore."""
    old = page.viewport_size
    if old is None:
        return None
    height = page.evaluate("""() => Math.max(document.documentElement.scrollHeight,
        ...Array.from(document.querySelectorAll('[data-testid=stMain], section.main, [data-testid=stAppViewContainer]'))
            .map(e => e.scrollHeight))""")
    page.set_viewport_size({"width": old["width"], "height": min(max(height, old["height"]), TALLEST_VIEW)})
    # charts off screen drew nothing new (app/views/live/js/chart_view.js): now in view, they catch up
    page.wait_for_function("() => !document.querySelector('.pd-chart[data-behind=true]')", timeout=60_000)
    return old


def assert_clean(page, name: str) -> None:
    """No serious or critical WCAG 2 A/AA violation anywhere on the page (the window grown to the
    page's height first), with a full-page screenshot kept."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"a11y-{name}.png"), full_page=True)
    old = _whole_page_in_view(page)
    try:
        found = axe_violations(page)
    finally:
        if old is not None:
            page.set_viewport_size(old)
    assert not found, f"{name}: axe found serious or critical WCAG 2 A/AA violations:\n{describe(found)}"
    assert page.locator("[data-testid=stException]").count() == 0
