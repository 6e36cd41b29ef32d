// The player: one clock per page that decides which step every view shows, so pause, slow
// motion, step and the scrubber move all views together while the model keeps running on the
// server.
//
// It does not care where steps come from. A data source (the token stream, a chart, a page with
// no token stream at all) announces what it holds with `player().offer(runId, frames, meta)`;
// the clock runs over every step anyone announced, contiguous from step 0. A view registered
// with `player().attach(id, view)` is told to draw with `view.drawUpTo(step)`; it may also have
// `rewind()` (the player went back: start again from the base), `onMode(mode)` and
// `checkBehind(player, now)` (called twice a second: a view that cannot reach the step shown
// asks its source for a resend). The player's fields are plain data that tests read:
// runId, mode ("live" | "slow" | "paused"), shown and available (step indices, -1 for none),
// replay, views.

const MIN_GAP_MS = 40; // at most 25 redraws per second in real time
const SLOW_FACTOR = 5;

// This page's player, created (and its clock started) on first use.
function player() {
  const lab = pdLab();
  if (!lab.player) lab.player = createPlayer();
  return lab.player;
}

function createPlayer() {
  const p = {
    runId: null, mode: "live", shown: -1, available: -1, known: new Set(), latency: {},
    replay: false, pollS: 0.5, lastAdvance: 0, lastBehindCheck: 0, views: new Map(),
  };
  // Methods on the shared object, so that a later evaluation of this module, or a source in
  // another script, drives this same clock.
  p.offer = (runId, frames, meta) => offer(p, runId, frames, meta);
  p.attach = (id, view) => { p.views.set(id, view); return view; };
  p.show = (step) => show(p, step);
  p.seekTo = (step) => seekTo(p, step);
  p.setMode = (mode) => setMode(p, mode);
  p.stepOnce = () => stepOnce(p);
  p.stepBack = () => stepBack(p);
  installKeys(p);
  const loop = () => {
    try { tick(p); } finally { setTimeout(loop, 16); } // one failing draw must not stop the clock
  };
  loop();
  return p;
}

// `frames`: [{step, latency_ms}] (or bare step numbers); the recorded latency of a step paces
// its display. `meta`: {replay, pollS}, each optional. A run id the player is not on starts that
// run from step -1 (nothing shown).
function offer(p, runId, frames, meta) {
  if (runId === null || runId === undefined) return p;
  meta = meta || {};
  if (runId !== p.runId) startRun(p, runId, !!meta.replay);
  else if (meta.replay !== undefined && !!meta.replay !== p.replay) setReplay(p, !!meta.replay);
  if (typeof meta.pollS === "number" && meta.pollS > 0) p.pollS = meta.pollS;
  for (const f of frames || []) {
    const step = typeof f === "number" ? f : f.step;
    p.known.add(step);
    if (typeof f === "object" && typeof f.latency_ms === "number") p.latency[step] = f.latency_ms;
  }
  while (p.known.has(p.available + 1)) p.available += 1;
  return p;
}

function startRun(p, runId, replay) {
  p.runId = runId; p.shown = -1; p.available = -1; p.known = new Set(); p.latency = {};
  p.lastAdvance = 0; p.replay = false;
  if (replay) setReplay(p, true);
  // The step log is per run: another Streamlit page of this tab starts its own.
  pdLab().steps = { runId: runId };
}

function setReplay(p, replay) {
  p.replay = replay; // a recorded trace: every step is here, play it at the recorded pace
  if (!replay) return;
  p.mode = "live";
  p.lastAdvance = performance.now();
  for (const view of p.views.values()) if (view.onMode) view.onMode(p.mode);
}

// What each view drew, in order (a test demands the exact sequence, so a skipped step fails).
function logStep(name, step) {
  const log = pdLab().steps;
  (log[name] = log[name] || []).push(step);
}

function checkBehind(p, now) {
  if (p.runId === null || p.available < 0 || now - p.lastBehindCheck < 500) return;
  p.lastBehindCheck = now;
  for (const view of p.views.values()) if (view.checkBehind) view.checkBehind(p, now);
}

function tick(p) {
  const now = performance.now();
  checkBehind(p, now);
  if (p.replay) { replayTick(p, now); return; }
  let target = p.shown;
  if (p.mode === "live" && p.available > p.shown) {
    // Replay at the recorded pace, one poll behind the model, so the steps that arrive together
    // in one fragment pass are spread out as they happened; hurry when falling behind.
    const lag = p.available - p.shown;
    // A fragment pass (every pollS) brings up to ~14 steps a second's worth, so a lag of two
    // passes is normal; beyond it hurry, and far beyond it (a hidden tab) jump ahead.
    const perPass = Math.max(4, Math.ceil(14 * p.pollS));
    const gap = lag > 2 * perPass ? MIN_GAP_MS : Math.max(MIN_GAP_MS, Math.min(p.latency[p.shown + 1] || 0, 250) * 0.8);
    if (now - p.lastAdvance >= gap) target = lag > 4 * perPass + 2 ? p.available - perPass : p.shown + 1;
  } else if (p.mode === "slow" && p.available > p.shown) {
    const wait = (p.latency[p.shown + 1] || 50) * SLOW_FACTOR;
    if (now - p.lastAdvance >= wait) target = p.shown + 1;
  }
  if (target !== p.shown) show(p, target, now);
}

function show(p, step, now) {
  p.shown = step;
  p.lastAdvance = now || performance.now();
  for (const view of p.views.values()) view.drawUpTo(step);
}

// ---- replay: recorded pace, step back, scrub (views keep their frames, so any step can be redrawn)
function replayTick(p, now) {
  if (p.mode === "paused" || p.available <= p.shown) return;
  const wait = Math.min(p.latency[p.shown + 1] || 50, 2000) * (p.mode === "slow" ? SLOW_FACTOR : 1);
  if (now - p.lastAdvance >= wait) show(p, p.shown + 1, now);
}

function seekTo(p, step) {
  step = Math.max(-1, Math.min(step, p.available));
  if (step < p.shown) {
    for (const view of p.views.values()) if (view.rewind) view.rewind();
  }
  show(p, step);
}

function stepBack(p) {
  setMode(p, "paused");
  seekTo(p, p.shown - 1);
}

function setMode(p, mode) {
  if (p.replay && mode !== "paused" && p.available >= 0 && p.shown >= p.available) seekTo(p, -1); // play again
  p.mode = mode;
  p.lastAdvance = performance.now();
  for (const view of p.views.values()) if (view.onMode) view.onMode(mode);
}

function stepOnce(p) {
  setMode(p, "paused");
  if (p.shown < p.available) show(p, p.shown + 1);
}

function installKeys(p) {
  const lab = pdLab();
  if (lab.installed.keys) return;
  lab.installed.keys = true;
  document.addEventListener("keydown", (ev) => {
    const t = ev.target;
    const tag = (t && t.tagName) || "";
    if (["INPUT", "TEXTAREA", "SELECT"].includes(tag) || (t && t.isContentEditable)) return;
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (p.runId === null) return;
    if (ev.key === " " && tag !== "BUTTON") {
      setMode(p, p.mode === "paused" ? "live" : "paused");
    } else if (ev.key === "ArrowRight" || ev.key === ".") {
      stepOnce(p);
    } else if (ev.key === "ArrowLeft" || ev.key === ",") {
      stepBack(p);
    } else if (ev.key === "s" || ev.key === "S") {
      setMode(p, "slow");
    } else if (ev.key === "l" || ev.key === "L") {
      setMode(p, "live");
    } else {
      return;
    }
    ev.preventDefault();
  });
}
