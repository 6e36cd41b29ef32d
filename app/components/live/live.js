// Live drawing for Prefill & Decode Lab (Streamlit components v2, no iframe).
//
// Python sends each keyed instance only the steps it has not sent recently (a small overlap
// guards against a render React skipped). Everything is kept on `window`, keyed by instance, so
// a re-mounted element redraws from memory and a re-sent step is ignored. One shared player
// decides which step is shown, so pause / slow motion / step move every chart together while
// the model keeps running on the server. All text goes in with textContent (never innerHTML).

const MIN_GAP_MS = 40; // at most 25 redraws per second in real time
const SLOW_FACTOR = 5;
const REDRAW_MIN_MS = 100; // per chart: at most 10 Plotly redraws a second

function plotlySrc() {
  const dir = window.location.pathname.replace(/\/[^/]*$/, "/");
  return dir + "app/static/plotly.min.js";
}

function loadPlotly() {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  if (!window.__pdPlotlyPromise) {
    window.__pdPlotlyPromise = new Promise((resolve, reject) => {
      const s = document.createElement("script");
      s.src = plotlySrc();
      s.async = true;
      s.onload = () => resolve(window.Plotly);
      s.onerror = () => {
        window.__pdPlotlyPromise = null;
        reject(new Error("could not load " + s.src));
      };
      document.head.appendChild(s);
    });
  }
  return window.__pdPlotlyPromise;
}

// ---- the shared player --------------------------------------------------------------------
function player() {
  if (!window.__pdPlayer) {
    window.__pdPlayer = {
      runId: null, mode: "live", shown: -1, available: -1, latency: {}, views: new Map(),
      lastAdvance: 0, started: false, replay: false,
    };
    window.__pdSteps = { runId: null };
    window.__pdAfterplot = [];
    installKeys();
    installBlankWatchdog();
    if (typeof PD_CSS === "string" && !document.getElementById("pd-live-css")) {
      const style = document.createElement("style");
      style.id = "pd-live-css";
      style.textContent = PD_CSS;
      document.head.appendChild(style);
    }
  }
  const p = window.__pdPlayer;
  if (!p.started) {
    p.started = true;
    const loop = () => { tick(); setTimeout(loop, 16); };
    loop();
  }
  return p;
}

function resetPlayer(runId, replay) {
  const p = player();
  p.runId = runId; p.shown = -1; p.available = -1; p.latency = {}; p.lastAdvance = 0;
  p.replay = !!replay; // a recorded trace: every step is here, play it at the recorded pace
  if (p.replay) { p.mode = "live"; p.lastAdvance = performance.now(); }
  window.__pdSteps = { runId: runId };
}

function logStep(name, step) {
  const log = window.__pdSteps;
  (log[name] = log[name] || []).push(step);
}

// A chart that cannot show the step the player shows (it never got that frame, or never got this
// run's base figure) and has had no send fixing it for a while asks for everything again: the last
// send of a run may be the one that was lost, and then no later send would come by itself.
function checkBehind(p, now) {
  if (p.runId === null || p.available < 0 || now - (p.lastBehindCheck || 0) < 500) return;
  p.lastBehindCheck = now;
  for (const view of p.views.values()) {
    if (!(view instanceof ChartView)) continue;
    const mine = view.runId === p.runId;
    if (mine && (view.applied >= p.shown || view.frames.has(view.applied + 1))) { view.behindSince = null; continue; }
    if (!view.behindSince) { view.behindSince = now; continue; }
    if (now - view.behindSince > 1500) {
      askResendIfBehind(view, { run_id: p.runId, total: p.available + 1 }, mine ? view.applied + 1 : 0);
    }
  }
}

function tick() {
  const p = window.__pdPlayer;
  const now = performance.now();
  checkBehind(p, now);
  let target = p.shown;
  if (p.replay) { replayTick(p, now); return; }
  if (p.mode === "live" && p.available > p.shown) {
    // Replay at the recorded pace, one poll behind the model, so the steps that arrive together
    // in one fragment pass are spread out as they happened; hurry when falling behind.
    const lag = p.available - p.shown;
    // A fragment pass (every poll_s) brings up to ~14 steps a second's worth, so a lag of two
    // passes is normal; beyond it hurry, and far beyond it (a hidden tab) jump ahead.
    const perPass = Math.max(4, Math.ceil(14 * p.pollS));
    const gap = lag > 2 * perPass ? MIN_GAP_MS : Math.max(MIN_GAP_MS, Math.min(p.latency[p.shown + 1] || 0, 250) * 0.8);
    if (now - p.lastAdvance >= gap) target = lag > 4 * perPass + 2 ? p.available - perPass : p.shown + 1;
  } else if (p.mode === "slow" && p.available > p.shown) {
    const wait = (p.latency[p.shown + 1] || 50) * SLOW_FACTOR;
    if (now - p.lastAdvance >= wait) target = p.shown + 1;
  }
  if (target !== p.shown) show(target, now);
}

function show(step, now) {
  const p = window.__pdPlayer;
  p.shown = step;
  p.lastAdvance = now || performance.now();
  for (const view of p.views.values()) view.drawUpTo(step);
}

// ---- replay: recorded pace, step back, scrub (frames are kept, so any step can be redrawn) ----
function replayTick(p, now) {
  if (p.mode === "paused" || p.available <= p.shown) return;
  const wait = Math.min(p.latency[p.shown + 1] || 50, 2000) * (p.mode === "slow" ? SLOW_FACTOR : 1);
  if (now - p.lastAdvance >= wait) show(p.shown + 1, now);
}

function seekTo(step) {
  const p = player();
  step = Math.max(-1, Math.min(step, p.available));
  if (step < p.shown) {
    for (const view of p.views.values()) if (view.rewind) view.rewind();
  }
  show(step);
}
window.__pdSeek = seekTo;

function stepBack() {
  const p = player();
  setMode("paused");
  seekTo(p.shown - 1);
}

function setMode(mode) {
  const p = player();
  if (p.replay && mode !== "paused" && p.available >= 0 && p.shown >= p.available) seekTo(-1); // play again
  p.mode = mode;
  p.lastAdvance = performance.now();
  for (const view of p.views.values()) if (view.onMode) view.onMode(mode);
}

function stepOnce() {
  const p = player();
  setMode("paused");
  if (p.shown < p.available) show(p.shown + 1);
}

function installKeys() {
  document.addEventListener("keydown", (ev) => {
    const t = ev.target;
    const tag = (t && t.tagName) || "";
    if (["INPUT", "TEXTAREA", "SELECT"].includes(tag) || (t && t.isContentEditable)) return;
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const p = window.__pdPlayer;
    if (!p || p.runId === null) return;
    if (ev.key === " " && tag !== "BUTTON") {
      setMode(p.mode === "paused" ? "live" : "paused");
    } else if (ev.key === "ArrowRight" || ev.key === ".") {
      stepOnce();
    } else if (ev.key === "ArrowLeft" || ev.key === ",") {
      stepBack();
    } else if (ev.key === "s" || ev.key === "S") {
      setMode("slow");
    } else if (ev.key === "l" || ev.key === "L") {
      setMode("live");
    } else {
      return;
    }
    ev.preventDefault();
  });
}

// ---- blank-page watchdog ------------------------------------------------------------------
// Under heavy load Streamlit's page can, rarely, unmount its whole app after a render error and
// leave the reader a white page (issue 5). This script lives in the page's own window, so its
// timer outlives the app: when the app has been gone for BLANK_AFTER_MS it reloads the page,
// at most once every BLANK_RELOAD_EVERY_MS (so a page that fails at once does not loop). The
// address bar holds the prompt and settings (app/share_links.py), so the reload keeps them, and
// the `recovered` key it adds makes the page say what happened.
const BLANK_AFTER_MS = 3000;
const BLANK_RELOAD_EVERY_MS = 60000;
const BLANK_KEY = "pdBlankReloadAt";

function installBlankWatchdog() {
  let goneSince = null;
  setInterval(() => {
    if (document.querySelector('[data-testid="stApp"]')) { goneSince = null; return; }
    const now = Date.now();
    if (goneSince === null) goneSince = now;
    if (now - goneSince < BLANK_AFTER_MS) return;
    try {
      if (now - Number(window.sessionStorage.getItem(BLANK_KEY) || 0) < BLANK_RELOAD_EVERY_MS) return;
      window.sessionStorage.setItem(BLANK_KEY, String(now));
    } catch (e) { return; } // no storage to remember the last reload: never reload, never loop
    const url = new URL(window.location.href);
    url.searchParams.set("recovered", "1");
    window.location.replace(url.toString());
  }, 500);
}

// ---- figure patches (mirror of app/patches.py apply_patch) --------------------------------
function setPath(target, path, value) {
  const keys = path.split(".");
  for (const k of keys.slice(0, -1)) {
    if (typeof target[k] !== "object" || target[k] === null) target[k] = {};
    target = target[k];
  }
  target[keys[keys.length - 1]] = value;
}

function applyPatch(fig, patch) {
  for (const [idx, arrays] of Object.entries(patch.append || {})) {
    const trace = fig.data[Number(idx)];
    for (const [key, values] of Object.entries(arrays)) trace[key] = (trace[key] || []).concat(values);
  }
  for (const [idx, arrays] of Object.entries(patch.cols || {})) {
    const trace = fig.data[Number(idx)];
    for (const [key, values] of Object.entries(arrays)) {
      if (key === "z" || key === "customdata" || key === "text") {
        const rows = trace[key] || values.map(() => []);
        trace[key] = rows.map((row, i) => row.concat(values[i]));
      } else {
        trace[key] = (trace[key] || []).concat(values);
      }
    }
  }
  for (const [path, value] of Object.entries(patch.layout || {})) setPath(fig.layout, path, value);
}

function pointCount(fig) {
  let n = 0;
  for (const t of fig.data) {
    if (t.z) for (const row of t.z) n += row.length;
    else n += (t.y || []).length;
  }
  return n;
}

function themeColors(el) {
  // getComputedStyle forces a style recalculation; read it at most once a second (the theme
  // rarely changes), not on every redraw of every chart.
  const now = performance.now();
  const cache = window.__pdTheme;
  if (cache && now - cache.t < 1000) return cache.colors;
  const css = getComputedStyle(el);
  const text = (css.getPropertyValue("--st-text-color") || "").trim() || css.color || "#31333F";
  const colors = { text: text, grid: "rgba(128,128,128,0.25)" };
  window.__pdTheme = { t: now, colors: colors };
  return colors;
}

// The last few sends a view received (run, first and last step, base or not): what a test or a
// developer reads when a view looks stuck.
function noteReceipt(view, data) {
  const fr = data.frames || [];
  (view.receipts = view.receipts || []).push([data.run_id, fr.length ? fr[0].step : null,
    fr.length ? fr[fr.length - 1].step : null, !!(data.base || data.prompt), Math.round(performance.now())]);
  if (view.receipts.length > 12) view.receipts.shift();
}

// Ask Python for every step again when this view cannot reach the run's last step with what it
// holds: under load the frontend can coalesce renders, so a send (even the one carrying the base
// figure) may never reach this view, and nothing later would repeat it. At most once a second.
function askResendIfBehind(view, data, have) {
  if (typeof data.total !== "number" || have >= data.total || !view.trigger) return;
  const now = performance.now();
  if (view.lastAsk && now - view.lastAsk < 1000) return;
  view.lastAsk = now;
  view.resends = (view.resends || 0) + 1;
  view.trigger("resend", { run: data.run_id, have: have, total: data.total, t: Math.round(now) });
}

// ---- a chart view -------------------------------------------------------------------------
class ChartView {
  constructor(key, name) {
    this.key = key; this.name = name; this.runId = null; this.fig = null; this.frames = new Map();
    this.applied = -1; this.root = null; this.div = null; this.drawing = false; this.dirty = false;
    this.lastPoints = 0; this.plotted = false; this.hidden = new Set(); this.legendKey = null;
  }

  mount(parent) {
    if (this.root && this.root.isConnected && this.root.parentNode === parent) return;
    this.root = document.createElement("div");
    this.root.className = "pd-chart";
    this.root.dataset.chart = this.name;
    this.titleEl = element("div", "pd-chart-title");
    this.titleEl.setAttribute("role", "heading");
    this.titleEl.setAttribute("aria-level", "4");
    this.subEl = element("div", "pd-chart-sub");
    this.notesEl = element("div", "pd-chart-notes");
    this.div = element("div", "pd-plot");
    this.legendEl = element("div", "pd-legend");
    this.legendEl.setAttribute("role", "group");
    this.legendEl.setAttribute("aria-label", "Legend: press an entry to hide or show that series");
    this.legendKey = null;
    this.root.append(this.titleEl, this.subEl, this.notesEl, this.div, this.legendEl);
    parent.replaceChildren(this.root);
    this.plotted = false;
    // Charts off screen are not redrawn (their data still advances): on a 2-core machine the
    // browser shares the CPU with the model, and the reader only sees the charts in view.
    this.visible = true;
    if (window.IntersectionObserver) {
      const seen = new IntersectionObserver((entries) => {
        this.visible = entries.some((e) => e.isIntersecting);
        if (this.visible && this.stale) { this.stale = false; this.react(); }
      }, { rootMargin: "200px" });
      seen.observe(this.root);
    }
    // The chart is drawn at an explicit width read here, not with Plotly's autosize/responsive
    // mode, which measures the container on every redraw (about a third of a redraw's time).
    this.width = this.root.clientWidth || null;
    if (window.ResizeObserver) {
      new ResizeObserver((entries) => {
        const w = Math.round(entries[0].contentRect.width);
        if (w && w !== this.width) { this.width = w; if (this.plotted) this.react(); }
      }).observe(this.root);
    }
    if (this.fig) this.react();
  }

  receive(data) {
    // Tests stand in for a render the frontend coalesced away by dropping sends here.
    if (window.__pdTestDrop && window.__pdTestDrop(this.name, data)) return;
    noteReceipt(this, data);
    if (data.run_id !== this.runId) {
      if (!data.base) { askResendIfBehind(this, data, 0); return; } // it needs a send from step 0
      this.runId = data.run_id; this.base = data.base; this.fig = JSON.parse(JSON.stringify(data.base));
      this.frames = new Map(); this.applied = -1; this.lastPoints = 0;
      this.react();
    }
    for (const f of data.frames || []) if (f.step > this.applied) this.frames.set(f.step, f.patch);
    let have = this.applied + 1;
    while (this.frames.has(have)) have += 1;
    askResendIfBehind(this, data, have);
    const p = player();
    if (p.runId === this.runId) this.drawUpTo(p.shown);
  }

  drawUpTo(step) {
    if (!this.fig || window.__pdPlayer.runId !== this.runId) return;
    let changed = false;
    while (this.applied < step && this.frames.has(this.applied + 1)) {
      const next = this.applied + 1;
      applyPatch(this.fig, this.frames.get(next)); // frames are kept: step back / scrub redraws from base
      this.applied = next;
      logStep(this.name, next);
      changed = true;
    }
    if (changed) this.react();
  }

  rewind() {
    if (!this.base) return;
    this.fig = JSON.parse(JSON.stringify(this.base));
    this.applied = -1;
    this.react();
  }

  react() {
    if (!this.div || !this.fig) return;
    this.root.dataset.runId = String(this.runId);
    this.root.dataset.applied = String(this.applied + 1);
    if (this.name === "kv") this.root.dataset.kvColumns = String((this.fig.data[0].x || []).length);
    if (!this.visible && this.plotted) { this.stale = true; return; }
    if (this.drawing) { this.dirty = true; return; }
    // At most one Plotly redraw per chart every REDRAW_MIN_MS: steps arriving faster are drawn
    // together (each is still applied and logged). On a 2-core machine the browser's redraws
    // compete with the model for the CPU; a full Plotly redraw costs tens of ms.
    const wait = REDRAW_MIN_MS - (performance.now() - (this.lastDraw || 0));
    if (this.plotted && wait > 0) {
      if (!this.pending) this.pending = setTimeout(() => { this.pending = null; this.react(); }, wait);
      return;
    }
    this.lastDraw = performance.now();
    this.drawing = true;
    const colors = themeColors(this.root);
    const sized = this.width ? { autosize: false, width: this.width } : { autosize: true };
    const layout = Object.assign({}, this.fig.layout, { datarevision: this.applied }, sized);
    layout.font = Object.assign({}, layout.font || {}, { color: colors.text });
    for (const ax of ["xaxis", "yaxis", "yaxis2"]) {
      if (layout[ax]) layout[ax] = Object.assign({ gridcolor: colors.grid, zerolinecolor: colors.grid }, layout[ax]);
    }
    this.lift(layout);
    const data = this.hidden.size === 0 ? this.fig.data
      : this.fig.data.map((t, i) => (this.hidden.has(i) ? Object.assign({}, t, { visible: "legendonly" }) : t));
    loadPlotly().then((Plotly) => {
      const first = !this.plotted;
      const t0 = performance.now();
      const done = Plotly.react(this.div, data, layout,
        { responsive: !this.width, displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d"] });
      if (first) {
        this.plotted = true;
        this.div.on("plotly_afterplot", () => {
          const n = pointCount(this.fig);
          if (n > this.lastPoints) {
            window.__pdAfterplot.push({ t: performance.now(), chart: this.name, points: n, run: this.runId });
          }
          this.lastPoints = n;
        });
      }
      return Promise.resolve(done).then(() => {
        // how long a redraw of this chart takes here (app.bench reports the median)
        const log = (window.__pdDrawMs = window.__pdDrawMs || {});
        (log[this.name] = log[this.name] || []).push(performance.now() - t0);
        if (log[this.name].length > 400) log[this.name].shift();
      });
    }).catch((err) => {
      this.root.dataset.error = String(err);
      this.div.textContent = "The chart could not be drawn: " + err;
    }).finally(() => {
      this.drawing = false;
      if (this.dirty) { this.dirty = false; this.react(); }
    });
  }

  // The title, the notes above the plot and the legend are drawn here as HTML, not by Plotly:
  // Plotly measures every text it draws on each redraw, and in Streamlit's large page each
  // measurement forces a layout of the whole document (a third of a live redraw's time when
  // measured). As HTML they are also plain text to a screen reader. The plot keeps its height.
  lift(layout) {
    const title = String((layout.title && layout.title.text) || "").split(/<br\s*\/?>/i);
    setText(this.titleEl, plainText(title[0]));
    setText(this.subEl, plainText(title.slice(1).join(" ")));
    const notes = layout.annotations || [];
    const above = notes.filter((a) => a.yref === "paper" && a.xref === "paper" && a.y >= 1);
    layout.annotations = notes.filter((a) => !above.includes(a));
    this.renderNotes(above, !!(layout.meta && layout.meta.notes_row));
    const margin = Object.assign({ t: 50, b: 80 }, layout.margin || {});
    const top = (layout.shapes || []).some((s) => s.yref === "paper" && s.y1 > 1) ? 16 : 8;
    const bottom = Math.min(margin.b, 55);
    layout.height = Math.max(200, (layout.height || 360) - (margin.t - top) - (margin.b - bottom));
    layout.margin = Object.assign({}, margin, { t: top, b: bottom });
    layout.title = { text: "" };
    layout.showlegend = false;
    this.renderLegend();
  }

  // `keepRow`: the figure asks for the notes row even while it has no notes (layout.meta.notes_row),
  // so the plot does not jump down when the first note arrives.
  renderNotes(notes, keepRow) {
    this.notesEl.hidden = notes.length === 0 && !keepRow;
    const key = JSON.stringify(notes.map((a) => [a.text, a.xanchor, a.font && a.font.color]));
    if (key === this.notesKey) return;
    this.notesKey = key;
    const side = (anchor) => {
      const box = element("div", "pd-chart-notes-" + anchor);
      for (const a of notes.filter((n) => (n.xanchor === "right" ? "right" : "left") === anchor)) {
        const span = element("span", "pd-chart-note");
        span.textContent = plainText(a.text);
        if (a.font && a.font.color) span.style.color = a.font.color;
        box.appendChild(span);
      }
      return box;
    };
    this.notesEl.replaceChildren(side("left"), side("right"));
  }

  renderLegend() {
    const entries = this.fig.data.map((t, i) => [t, i])
      .filter(([t]) => t.name && t.showlegend !== false && t.type !== "heatmap");
    const key = this.runId + "|" + entries.map(([t]) => t.name).join("|");
    if (key === this.legendKey) return;
    this.legendKey = key;
    this.legendEl.replaceChildren(...entries.map(([t, i]) => {
      const b = element("button", "pd-legend-item");
      b.type = "button";
      b.setAttribute("aria-pressed", String(!this.hidden.has(i)));
      b.title = "Hide or show this series";
      const label = element("span", "");
      label.textContent = t.name;
      b.append(swatch(t), label);
      b.addEventListener("click", () => {
        if (this.hidden.has(i)) this.hidden.delete(i); else this.hidden.add(i);
        b.setAttribute("aria-pressed", String(!this.hidden.has(i)));
        this.react();
      });
      return b;
    }));
    this.legendEl.hidden = entries.length === 0;
  }
}

function element(tag, cls) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  return e;
}

function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
  el.hidden = text === "";
}

// Plotly's label markup (tags and a few entities) to plain text; it goes in with textContent.
function plainText(s) {
  return String(s || "").replace(/<[^>]*>/g, "").replace(/&lt;/g, "<").replace(/&gt;/g, ">")
    .replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&amp;/g, "&").trim();
}

// A legend key drawn like the trace: a bar block, or a line (dashed if the trace is) with its marker.
function swatch(t) {
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("width", "30"); svg.setAttribute("height", "14"); svg.setAttribute("aria-hidden", "true");
  const marker = t.marker || {};
  const line = t.line || {};
  const color = [marker.color, line.color].find((c) => typeof c === "string") || "#999999";
  const add = (tag, attrs) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
    svg.appendChild(e);
  };
  const mode = t.mode || (t.type === "scatter" ? "markers" : "");
  if (t.type === "bar") {
    add("rect", { x: 4, y: 2, width: 22, height: 10, fill: color });
  } else {
    if (mode.includes("lines")) {
      const dash = { dash: "5,3", dot: "2,2", dashdot: "5,2,2,2" }[line.dash] || "none";
      add("line", { x1: 1, x2: 29, y1: 7, y2: 7, stroke: line.color || color, "stroke-width": 2, "stroke-dasharray": dash });
    }
    if (mode.includes("markers")) {
      const symbol = String(marker.symbol || "circle");
      const fill = symbol.includes("open") ? "none" : color;
      if (symbol.startsWith("diamond")) add("polygon", { points: "15,1 21,7 15,13 9,7", fill: fill, stroke: color, "stroke-width": 1.5 });
      else add("circle", { cx: 15, cy: 7, r: 4, fill: fill, stroke: color, "stroke-width": 1.5 });
    }
  }
  return svg;
}

// ---- the controls view: pace buttons, token stream, metric tiles ---------------------------
class ControlsView {
  constructor(key) {
    this.key = key; this.runId = null; this.frames = new Map(); this.applied = -1; this.root = null;
    this.status = {};
  }

  mount(parent) {
    if (this.root && this.root.isConnected && this.root.parentNode === parent) return;
    const root = document.createElement("div");
    root.className = "pd-controls";
    root.innerHTML = `
      <div class="pd-bar" role="toolbar" aria-label="Display pace">
        <span class="pd-bar-label">Display pace:</span>
        <button type="button" data-mode="live" title="Real time (key L)">▶ Real time</button>
        <button type="button" data-mode="slow" title="Slow motion (key S)">Slow ×${SLOW_FACTOR}</button>
        <button type="button" data-mode="paused" title="Pause / resume (Space)">❚❚ Pause</button>
        <button type="button" data-act="back" title="Show one token less (←)">← Back</button>
        <button type="button" data-act="step" title="Show one more token (→)">Step →</button>
        <label class="pd-scrub-box">step <input type="range" class="pd-scrub" min="0" max="0" value="0"
          aria-label="Scrub through the steps"> <span class="pd-scrub-text"></span></label>
        <span class="pd-keys">keys: Space pause · ← → step · S slow · L real time</span>
      </div>
      <div class="pd-status" aria-live="polite"></div>
      <div class="pd-tiles" role="list"></div>
      <div class="pd-stream" aria-label="Token stream">
        <div class="pd-prompt-box"><div class="pd-box-label"></div><div class="pd-prompt-toks"></div></div>
        <div class="pd-gen-box"><div class="pd-box-label pd-gen-label"></div><div class="pd-gen-toks"></div></div>
      </div>`;
    for (const b of root.querySelectorAll("button[data-mode]")) b.addEventListener("click", () => setMode(b.dataset.mode));
    root.querySelector("button[data-act=step]").addEventListener("click", stepOnce);
    root.querySelector("button[data-act=back]").addEventListener("click", stepBack);
    root.querySelector(".pd-scrub").addEventListener("input", (ev) => {
      const step = Number(ev.target.value) - 1; // read first: setMode redraws the slider
      setMode("paused");
      seekTo(step);
    });
    parent.replaceChildren(root);
    this.root = root;
    this.redrawAll();
    this.onMode(player().mode);
  }

  onMode(mode) {
    if (!this.root) return;
    for (const b of this.root.querySelectorAll("button[data-mode]")) {
      b.setAttribute("aria-pressed", String(b.dataset.mode === mode));
    }
    this.root.dataset.mode = mode;
    this.renderStatus();
  }

  receive(data) {
    noteReceipt(this, data);
    const p = player();
    p.pollS = data.poll_s || 0.5;
    this.status = data.status || {};
    if (data.run_id !== this.runId) {
      if (!data.prompt) { this.renderStatus(); return; }
      this.runId = data.run_id; this.frames = new Map(); this.applied = -1; this.prompt = data.prompt;
      resetPlayer(data.run_id, data.replay);
      this.redrawAll();
    }
    for (const f of data.frames || []) {
      if (!this.frames.has(f.step)) this.frames.set(f.step, f);
      p.latency[f.step] = f.latency_ms;
    }
    while (this.frames.has(p.available + 1)) p.available += 1;
    if (this.runId === data.run_id) askResendIfBehind(this, data, p.available + 1);
    if (this.root) { this.root.dataset.available = String(p.available + 1); this.root.dataset.runId = String(this.runId); }
    this.renderStatus();
  }

  rewind() {
    if (!this.root) return;
    this.applied = -1;
    this.root.querySelector(".pd-gen-toks").replaceChildren();
    this.root.querySelector(".pd-tiles").replaceChildren();
    this.root.querySelector(".pd-prompt-box").classList.remove("pd-done");
    this.root.dataset.shown = "0";
  }

  redrawAll() {
    if (!this.root || !this.prompt) return;
    const box = this.root.querySelector(".pd-prompt-toks");
    box.replaceChildren(...this.prompt.map((t) => chip(t.text, t.special, "pd-prompt")));
    this.root.querySelector(".pd-prompt-box .pd-box-label").textContent =
      `Prompt after the chat template: ${this.prompt.length} tokens. Prefill reads them all in ONE forward pass.`;
    this.root.querySelector(".pd-gen-toks").replaceChildren();
    this.root.querySelector(".pd-tiles").replaceChildren();
    const shown = this.applied;
    this.applied = -1;
    this.root.querySelector(".pd-prompt-box").classList.remove("pd-done");
    this.drawUpTo(shown);
  }

  drawUpTo(step) {
    if (!this.root) return;
    const gen = this.root.querySelector(".pd-gen-toks");
    let last = null;
    while (this.applied < step && this.frames.has(this.applied + 1)) {
      const f = this.frames.get(this.applied + 1);
      this.applied += 1;
      const c = chip(f.text, f.special, "pd-gen");
      c.dataset.step = String(f.step);
      c.title = `${f.phase === "prefill" ? "made by the prefill" : "decode step " + f.step}: ${f.latency_ms.toFixed(1)} ms measured`;
      gen.appendChild(c);
      logStep("tokens", f.step);
      last = f;
    }
    if (last) {
      for (const old of gen.querySelectorAll(".pd-new")) old.classList.remove("pd-new");
      gen.lastChild.classList.add("pd-new");
      this.root.querySelector(".pd-prompt-box").classList.add("pd-done");
      this.renderTiles(last.tiles || []);
      this.root.dataset.shown = String(this.applied + 1);
    }
    this.root.querySelector(".pd-gen-label").textContent = this.applied < 0
      ? "Generated tokens appear here one decode step at a time."
      : `Generated: ${this.applied + 1} tokens (1 from the prefill, then 1 per decode step).`;
    this.renderStatus();
  }

  renderTiles(tiles) {
    const box = this.root.querySelector(".pd-tiles");
    box.replaceChildren(...tiles.map((t) => {
      const d = document.createElement("div");
      d.className = "pd-tile";
      d.setAttribute("role", "listitem");
      const l = document.createElement("div"); l.className = "pd-tile-label"; l.textContent = t.label;
      const v = document.createElement("div"); v.className = "pd-tile-value"; v.textContent = t.value;
      const n = document.createElement("div"); n.className = "pd-tile-note"; n.textContent = t.note;
      d.append(l, v, n);
      return d;
    }));
  }

  renderStatus() {
    if (!this.root) return;
    const p = player();
    const s = this.status || {};
    let text = s.text || "";
    if (this.runId !== null && p.available >= 0) {
      const lag = p.available - Math.max(this.applied, -1);
      const pace = { live: "real time", slow: `slow motion (${SLOW_FACTOR}× slower than measured)`, paused: "paused" }[p.mode];
      text += ` · display: ${pace}, showing ${this.applied + 1} of ${p.available + 1} tokens received`;
      if (lag > 0 && p.mode !== "live" && !p.replay) text += " (the model does not wait for the display)";
    }
    this.root.querySelector(".pd-status").textContent = text;
    this.root.dataset.status = s.state || "";
    this.root.dataset.replay = String(!!p.replay);
    const scrub = this.root.querySelector(".pd-scrub");
    if (scrub) {
      scrub.max = String(Math.max(p.available + 1, 0));
      scrub.value = String(this.applied + 1);
      scrub.disabled = p.available < 0;
      this.root.querySelector(".pd-scrub-text").textContent = `${this.applied + 1} / ${p.available + 1}`;
    }
  }
}

function chip(text, special, cls) {
  const span = document.createElement("span");
  span.className = "pd-tok " + cls + (special ? " pd-special" : "");
  // Make whitespace visible so token boundaries show; textContent keeps any markup inert.
  span.textContent = text === "" ? "∅" : text.replace(/\n/g, "↵").replace(/\t/g, "⇥");
  return span;
}

// ---- entry point --------------------------------------------------------------------------
export default function (component) {
  const { data, parentElement } = component;
  if (!data) return;
  const p = player();
  const id = data.instance;
  let view = p.views.get(id);
  if (!view) {
    view = data.kind === "controls" ? new ControlsView(id) : new ChartView(id, data.chart);
    p.views.set(id, view);
  }
  view.trigger = component.setTriggerValue;
  view.mount(parentElement);
  view.receive(data);
}
