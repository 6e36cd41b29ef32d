// A chart view: one Plotly chart drawn from a base figure plus one patch per step.
//
// It keeps every frame of its run, so a step back or a scrub redraws from the base. It is a data
// source for the player as well as a view: a page of charts with no token stream still plays.

const REDRAW_MIN_MS = 100; // per chart: at most 10 Plotly redraws a second

class ChartView {
  constructor(key, name) {
    this.key = key; this.name = name; this.runId = null; this.fig = null; this.frames = new Map();
    this.applied = -1; this.root = null; this.div = null; this.drawing = false; this.dirty = false;
    this.lastPoints = 0; this.plotted = false; this.hidden = new Set(); this.legendKey = null;
    this.revision = 0; // Plotly's datarevision: one per redraw (see react)
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
    // mode, which measures the container (a forced layout) on every redraw.
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
    const drop = pdLab().test.drop;
    if (drop && drop(this.name, data)) return;
    noteReceipt(this, data);
    if (data.run_id !== this.runId) {
      if (!data.base) { askResendIfBehind(this, data, 0); return; } // it needs a send from step 0
      this.runId = data.run_id; this.base = data.base; this.fig = JSON.parse(JSON.stringify(data.base));
      this.frames = new Map(); this.applied = -1; this.lastPoints = 0;
      this.react();
    }
    for (const f of data.frames || []) if (f.step > this.applied) this.frames.set(f.step, f.patch);
    askResendIfBehind(this, data, firstMissing(this.frames, this.applied + 1));
    const p = player().offer(this.runId, data.frames, { replay: data.replay, pollS: data.poll_s });
    if (p.runId === this.runId) this.drawUpTo(p.shown);
  }

  checkBehind(p, now) { resendIfStuck(this, p, now); }

  drawUpTo(step) {
    if (!this.fig || player().runId !== this.runId) return;
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
    // data-behind: this chart holds steps it has not drawn yet (off screen, or a redraw pending);
    // tests that read the whole page (the accessibility check) wait for it to clear
    this.root.dataset.behind = "true";
    if (!this.visible && this.plotted) { this.stale = true; return; }
    if (this.drawing) { this.dirty = true; return; }
    // At most one Plotly redraw per chart every REDRAW_MIN_MS: steps arriving faster are drawn
    // together (each is still applied and logged). On a 2-core machine the browser's redraws
    // compete with the model for the CPU, and a full Plotly redraw is not cheap.
    const wait = REDRAW_MIN_MS - (performance.now() - (this.lastDraw || 0));
    if (this.plotted && wait > 0) {
      if (!this.pending) this.pending = setTimeout(() => { this.pending = null; this.react(); }, wait);
      return;
    }
    if (this.pending) { clearTimeout(this.pending); this.pending = null; } // this draw is the one it waited for
    this.lastDraw = performance.now();
    this.drawing = true;
    const colors = themeColors(this.root);
    const sized = this.width ? { autosize: false, width: this.width } : { autosize: true };
    // Every redraw is a new data revision, also one with no new step (a queued redraw whose step
    // was already drawn, a chart caught up after it was off screen): the layout handed to Plotly
    // is built afresh without the ranges Plotly autoranged last time, and Plotly.react with an
    // unchanged datarevision skips the autorange, so each autoranged axis fell back to its
    // default range (0-4) under data drawn far above it.
    this.revision += 1;
    const layout = Object.assign({}, this.fig.layout, { datarevision: this.revision }, sized);
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
            pdLab().afterplot.push({ t: performance.now(), chart: this.name, points: n, run: this.runId });
          }
          this.lastPoints = n;
        });
      }
      return Promise.resolve(done).then(() => {
        // how long a redraw of this chart takes here (app.bench reports the median)
        const log = pdLab().drawMs;
        (log[this.name] = log[this.name] || []).push(performance.now() - t0);
        if (log[this.name].length > 400) log[this.name].shift();
      });
    }).catch((err) => {
      this.root.dataset.error = String(err);
      this.div.textContent = "The chart could not be drawn: " + err;
    }).finally(() => {
      this.drawing = false;
      if (this.dirty) { this.dirty = false; this.react(); } else if (!this.pending) this.root.dataset.behind = "false";
    });
  }

  // The title, the notes above the plot and the legend are drawn here as HTML, not by Plotly:
  // Plotly measures every text it draws on each redraw, and in Streamlit's large page each
  // measurement forces a layout of the whole document. As HTML they are also plain text to a
  // screen reader. The plot keeps its height.
  lift(layout) {
    const title = String((layout.title && layout.title.text) || "").split(/<br\s*\/?>/i);
    this.reserveTitle(layout.meta && layout.meta.titles, plainText(title[0]));
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

  // `titles`: every title the figure may take during its run (layout.meta.titles), when its finding
  // is read from the steps so far and may change mid-run. The title keeps the height of the tallest
  // at this width, so a longer one wrapping onto a second line does not push the plot down.
  reserveTitle(titles, current) {
    const width = this.width; // kept by mount's ResizeObserver: no layout read on every redraw
    const key = titles && width ? width + "|" + titles.join("|") : null;
    if (key === this.titleRoomKey) return;
    this.titleRoomKey = key;
    this.titleEl.style.minHeight = "";
    if (!key) return;
    let tallest = 0;
    for (const t of titles) {
      setText(this.titleEl, plainText(t));
      tallest = Math.max(tallest, this.titleEl.getBoundingClientRect().height);
    }
    setText(this.titleEl, current);
    this.titleEl.style.minHeight = Math.ceil(tallest) + "px";
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
        const text = plainText(a.text);
        const color = a.font && a.font.color;
        if (color && text.startsWith("■")) {
          // the square carries the series' colour; the words stay in the text colour (the accents,
          // vermillion on white among them, fall under WCAG's 4.5:1 for small text)
          const key = element("span", "pd-chart-note-key");
          key.textContent = "■";
          key.style.color = color;
          key.setAttribute("aria-hidden", "true");
          span.append(key, text.slice(1));
        } else {
          span.textContent = text;
          if (color) span.style.color = color;
        }
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
      // a trailing "(measured)" and the like becomes the page's mark: a word in a badge, as on the tiles
      const marked = MARKED.exec(t.name);
      label.textContent = marked ? marked[1] : t.name;
      b.append(swatch(t), label);
      if (marked) {
        const m = element("span", `pd-mark pd-mark-${marked[2]}`);
        m.textContent = marked[2];
        b.append(m);
      }
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

const MARKED = /^(.*\S) \((measured|computed|calibrated|predicted|recorded|estimated|simulated)\)$/;

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
      else if (symbol.startsWith("square")) add("rect", { x: 10, y: 2, width: 10, height: 10, fill: fill, stroke: color, "stroke-width": 1.5 });
      else add("circle", { cx: 15, cy: 7, r: 4, fill: fill, stroke: color, "stroke-width": 1.5 });
    }
  }
  return svg;
}
