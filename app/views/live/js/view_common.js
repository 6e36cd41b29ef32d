// What every view uses: receipts, resend requests, small DOM helpers. All text goes in with
// textContent (never innerHTML).

// The last few sends a view received (run, first and last step, base or not): what a test or a
// developer reads when a view looks stuck.
function noteReceipt(view, data) {
  const fr = data.frames || [];
  (view.receipts = view.receipts || []).push([data.run_id, fr.length ? fr[0].step : null,
    fr.length ? fr[fr.length - 1].step : null, !!(data.base || data.prompt), Math.round(performance.now())]);
  if (view.receipts.length > 12) view.receipts.shift();
}

// A send older than one this view already took: Streamlit can render an element left from an earlier
// pass after the current one, and both feed this view. Applied, it would put back that pass's state
// (a queued run's status over a finished one) with no later pass to correct it. Ignored, and counted.
function isStaleSend(view, data) {
  const s = data.sent;
  if (!s) return false;
  const last = view.sent;
  if (last && last.epoch === s.epoch && s.n < last.n) {
    view.staleSends = (view.staleSends || 0) + 1;
    return true;
  }
  view.sent = s;
  return false;
}

// Ask Python for every step again when this view cannot reach the run's last step with what it
// holds: under load the frontend can coalesce renders, so a send (even the one carrying the base
// figure) may never reach this view, and nothing later would repeat it. At most once a second.
// `data.total` (the run's step count that pass) is what makes a gap visible; a page that sends
// no total never asks.
function askResendIfBehind(view, data, have) {
  if (typeof data.total !== "number" || have >= data.total || !view.trigger) return;
  const now = performance.now();
  if (view.lastAsk && now - view.lastAsk < 1000) return;
  view.lastAsk = now;
  view.resends = (view.resends || 0) + 1;
  view.trigger("resend", { run: data.run_id, have: have, total: data.total, t: Math.round(now) });
}

// Called by the player twice a second. A view that cannot show the step the player shows (it never
// got that frame, or never got this run's first send) and has had no send fixing it for a while
// asks for everything again: the last send of a run may be the one that was lost, and then no
// later send would come by itself. Any source can move the player ahead of a view.
function resendIfStuck(view, p, now) {
  const mine = view.runId === p.runId;
  if (mine && (view.applied >= p.shown || view.frames.has(view.applied + 1))) { view.behindSince = null; return; }
  if (!view.behindSince) { view.behindSince = now; return; }
  if (now - view.behindSince > 1500) {
    askResendIfBehind(view, { run_id: p.runId, total: p.available + 1 }, mine ? view.applied + 1 : 0);
  }
}

// The first step missing from a view's frames (a Map keyed by step), counting from `from`.
function firstMissing(frames, from) {
  let have = from;
  while (frames.has(have)) have += 1;
  return have;
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
