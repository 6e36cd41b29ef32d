// The controls view: pace buttons and the scrubber (they drive the player), the run's status,
// the metric tiles and the token stream. Its frames carry each step's token, measured latency
// and tiles; it is a data source for the player like any chart.

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
        <span class="pd-keys" title="L real time · S slow · Space pause · ← → step">keys: L S Space ← →</span>
      </div>
      <div class="pd-status" aria-live="polite"></div>
      <div class="pd-tiles" role="list"></div>
      <div class="pd-stream" aria-label="Token stream">
        <div class="pd-prompt-box"><div class="pd-box-label"></div><div class="pd-prompt-toks"></div></div>
        <div class="pd-gen-box"><div class="pd-box-label pd-gen-label"></div><div class="pd-gen-toks"></div></div>
      </div>`;
    for (const b of root.querySelectorAll("button[data-mode]")) b.addEventListener("click", () => player().setMode(b.dataset.mode));
    root.querySelector("button[data-act=step]").addEventListener("click", () => player().stepOnce());
    root.querySelector("button[data-act=back]").addEventListener("click", () => player().stepBack());
    root.querySelector(".pd-scrub").addEventListener("input", (ev) => {
      const step = Number(ev.target.value) - 1; // read first: setMode redraws the slider
      player().setMode("paused");
      player().seekTo(step);
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
    this.status = data.status || {};
    const fresh = data.run_id !== this.runId;
    if (fresh) {
      if (!data.prompt) { this.renderStatus(); return; } // it needs a send from step 0
      this.runId = data.run_id; this.frames = new Map(); this.applied = -1; this.prompt = data.prompt;
      this.kept = data.kept || 0;
    }
    for (const f of data.frames || []) if (!this.frames.has(f.step)) this.frames.set(f.step, f);
    const p = player().offer(this.runId, data.frames, { replay: !!data.replay, pollS: data.poll_s || 0.5 });
    askResendIfBehind(this, data, firstMissing(this.frames, 0));
    if (fresh) this.redrawAll();
    this.drawUpTo(p.shown);
  }

  checkBehind(p, now) { resendIfStuck(this, p, now); }

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
    const kept = Math.min(this.kept || 0, this.prompt.length);
    // a follow-up: the conversation so far sits in the cache already; one mark stands for it
    const summary = document.createElement("span");
    summary.className = "pd-kept-summary";
    summary.textContent = `${kept} kept in the cache`;
    box.dataset.kept = String(kept);
    box.replaceChildren(...(kept ? [summary] : []),
                        ...this.prompt.slice(kept).map((t) => chip(t.text, t.special, "pd-prompt")));
    this.root.querySelector(".pd-prompt-box .pd-box-label").textContent = kept
      ? `Conversation after the chat template: ${this.prompt.length} tokens; prefill reads only the ${this.prompt.length - kept} new ones, in ONE forward pass.`
      : `Prompt after the chat template: ${this.prompt.length} tokens, nothing kept from before: prefill reads them all in ONE forward pass.`;
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
    const mine = player().runId === this.runId; // the player may be on a run this view has not got yet
    while (mine && this.applied < step && this.frames.has(this.applied + 1)) {
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
      : `Generated: ${this.applied + 1} tokens, 1 from the prefill, then 1 per decode step `
        + "(outlined: not yet in the cache).";
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
      if (t.mark) {  // where the number comes from, as a word (never colour alone), before what it covers
        const m = document.createElement("span"); m.className = `pd-mark pd-mark-${t.mark}`; m.textContent = t.mark;
        n.prepend(m, " ");
      }
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
      text += ` · display: ${pace}, ${this.applied + 1} of ${p.available + 1} shown`;
      if (lag > 0 && p.mode !== "live" && !p.replay) text += " (the model does not wait for the display)";
    }
    this.root.querySelector(".pd-status").textContent = text;
    this.root.dataset.status = s.state || "";
    this.root.dataset.available = String(p.available + 1);
    this.root.dataset.runId = String(this.runId);
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
