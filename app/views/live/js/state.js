// The live view's whole browser state: one object, `window.pdLab`.
//
// Streamlit (components v2) may evaluate this module several times in one page, so nothing is
// kept in module variables: every evaluation finds the same object on `window`, and a re-mounted
// element redraws from memory. Another script may have created the object first (a test's hook,
// the presenter's key handler), so only the missing fields are filled in.
//
//   player     the clock (player.js): steps known, step shown, pace, the views it moves
//   steps      per view, every step it drew in this run ({runId, kv: [0, 1, ...], tokens: ...})
//   afterplot  Plotly redraws that added points ({t, chart, points, run}; app.bench reads it)
//   drawMs     per chart, how long its recent redraws took (app.bench reports the median)
//   plotlyPromise  plotly.min.js loading, started once (plotly_loader.js)
//   theme      the theme colours read last, and when (read at most once a second)
//   installed  page-wide listeners already added (styles, keys, blank-page watchdog)
//   test       hooks a test may set: test.drop(chartName, data) returning true drops that send
//   tourKeys   the presenter's key handler is installed (app/views/live/presenter.py)
function pdLab() {
  const lab = window.pdLab || (window.pdLab = {});
  if (!lab.ready) {
    const defaults = {
      player: null, steps: { runId: null }, afterplot: [], drawMs: {}, plotlyPromise: null,
      theme: null, installed: {}, test: {}, tourKeys: false,
    };
    for (const [key, value] of Object.entries(defaults)) if (!(key in lab)) lab[key] = value;
    lab.ready = true;
  }
  return lab;
}
