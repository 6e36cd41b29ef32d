"""Browser checks that a live chart's y axes cover what it plots (shared by the live browser tests).

Plotly falls back to an axis' default range ([-1, 4], or [0, 4] with rangemode "tozero") when it
draws without autoranging; the data are still drawn, so bars of 538 MB stand flat at the top of a
0-4 axis. These helpers read what Plotly last drew (`_fullData`, `_fullLayout`) in every live
chart and report each y axis whose range misses its data.
"""

from __future__ import annotations

# Per live chart and y axis: the range drawn and the extent of the data drawn on that axis.
# Stacked bars count as their stack's top (and bottom for negative parts); heatmap rows count as
# their row coordinates; a guide line (hoverinfo "skip", the roofline's roof) is not data.
AXES_JS = """() => {
  const rows = [];
  for (const el of document.querySelectorAll('.pd-chart')) {
    const gd = el.querySelector('.js-plotly-plot');
    if (!gd || !gd._fullLayout || !gd._fullData) continue;
    const fl = gd._fullLayout;
    for (const name of ['yaxis', 'yaxis2']) {
      const ax = fl[name];
      if (!ax || !ax.range) continue;
      const conv = (v) => (ax.type === 'log' ? Math.log10(v) : v);
      let lo = Infinity, hi = -Infinity;
      const up = {}, down = {};
      for (const t of gd._fullData) {
        if (t.visible !== true || (t.yaxis || 'y') !== ax._id || t.hoverinfo === 'skip') continue;
        (t.y || []).forEach((y, i) => {
          if (typeof y !== 'number' || !isFinite(y)) return;
          if (t.type === 'bar' && fl.barmode === 'stack') {
            const s = y >= 0 ? up : down;
            const x = String(t.x[i]);
            s[x] = (s[x] || 0) + y;
            y = s[x];
          }
          lo = Math.min(lo, conv(y)); hi = Math.max(hi, conv(y));
        });
      }
      if (hi === -Infinity) continue;
      const r = ax.range.map(Number);
      const eps = 1e-9 * Math.max(1, Math.abs(hi), Math.abs(lo));
      rows.push({chart: el.dataset.chart, axis: name, range: r, dataMin: lo, dataMax: hi,
                 ok: Math.max(...r) >= hi - eps && Math.min(...r) <= lo + eps});
    }
  }
  return rows;
}"""

# True once a chart has drawn everything its view holds and has no redraw queued or in flight.
SETTLED_JS = """(name) => {
  const v = window.pdLab && window.pdLab.player && window.pdLab.player.views.get(name);
  const gd = document.querySelector(`.pd-chart[data-chart=${name}] .js-plotly-plot`);
  if (!v || !v.fig || !gd || !gd._fullData || v.drawing || v.pending || v.dirty || v.stale) return false;
  const count = (traces) => traces.reduce((n, t) => n + (t.z ? t.z.reduce((m, row) => m + row.length, 0)
                                                            : (t.y || []).length), 0);
  return count(gd._fullData) === count(v.fig.data);
}"""


def wait_settled(page, charts, timeout_ms: int = 20_000) -> None:
    """Until each chart has drawn all it holds; charts are scrolled into view first (a chart out of
    view is not redrawn until it comes back)."""
    for name in charts:
        page.locator(f".pd-chart[data-chart={name}]").scroll_into_view_if_needed()
        page.wait_for_function(f"({SETTLED_JS})('{name}')", timeout=timeout_ms)


def assert_axes_cover_data(page, charts, when: str = "") -> list[dict]:
    """Every y axis of every chart in `charts` covers the data that chart draws on it."""
    rows = page.evaluate(AXES_JS)
    seen = {r["chart"] for r in rows}
    assert set(charts) <= seen, f"{when}: charts with no data on a y axis: {set(charts) - seen}; {rows}"
    bad = [r for r in rows if r["chart"] in charts and not r["ok"]]
    assert not bad, f"{when}: y axes that miss their data: {bad}"
    return rows
