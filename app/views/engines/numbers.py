"""The engine lab's numbers: one row per request, the stall in each stream, the measured-against-
simulated table and the comparison in words. Plain functions of an EngineRun (measured) and the
simulator's token times for the same requests (simulated); testable without a browser.

The stall follows core.engines.lab.stall_of: a short stream's longest gap between two tokens among
the gaps that overlap the long prompt's time in the engine (from its sending to its first token).
Here the gap's two ends are kept too, so a chart can draw it where it happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import Any

from core.engines.lab import LONG, SHORT, stall_gap
from core.engines.record import EngineRun


@dataclass(frozen=True)
class Row:
    """One request as a chart row: its name, when it was sent, and its token times."""

    id: int
    name: str
    role: str
    sent_s: float
    token_s: list[float] = field(default_factory=list)
    error: str | None = None
    output_tokens: int = 0
    prompt_tokens: int = 0


def rows(run: EngineRun, token_s: dict[int, list[float]] | None = None) -> list[Row]:
    """Every request of `run` in id order, short streams named "stream 1", "stream 2", ..., long
    prompts "long prompt". With `token_s` (the simulator's times by id) those replace the measured
    ones; the send times stay the measured ones (the simulator's arrivals)."""
    out, shorts, longs = [], 0, 0
    for r in sorted(run.requests, key=lambda r: r.id):
        if r.role == LONG:
            longs += 1
            name = "long prompt" if longs == 1 else f"long prompt {longs}"
        else:
            shorts += 1
            name = f"stream {shorts}"
        times = list(r.token_s) if token_s is None else list(token_s.get(r.id, []))
        sent = r.left_s
        out.append(Row(r.id, name, r.role or SHORT, sent, times, r.error if token_s is None else None,
                       r.output_tokens, r.prompt_tokens))
    return out


def long_window(rs: list[Row]) -> tuple[float, float | None] | None:
    """(sent, first token or None) of the first long prompt, or None when the run has none."""
    for r in rs:
        if r.role == LONG:
            return r.sent_s, (r.token_s[0] if r.token_s else None)
    return None


def stall_gaps(rs: list[Row]) -> dict[int, tuple[float, float]]:
    """Every short stream's stall by request id (streams with no gap across the long prompt left out).
    None yet while the long prompt has no first token: its time in the engine has not ended (or it
    failed), so no stream's stall is known."""
    window = long_window(rs)
    if window is None or window[1] is None:
        return {}
    out = {}
    for r in rs:
        if r.role == SHORT:
            gap = stall_gap(r.token_s, *window)
            if gap is not None:
                out[r.id] = gap
    return out


def _median(values: list[float]) -> float | None:
    return median(values) if values else None


def typical_gap_s(rs: list[Row]) -> float | None:
    """The short streams' median gap between two tokens (the steady decode step, stalls included)."""
    return _median([b - a for r in rs if r.role == SHORT for a, b in zip(r.token_s, r.token_s[1:], strict=False)])


def role_figures(rs: list[Row]) -> dict[str, float | None]:
    """Medians over the short streams and the long prompt's own TTFT, and the median stall."""
    shorts = [r for r in rs if r.role == SHORT and r.token_s]
    longs = [r for r in rs if r.role == LONG and r.token_s]
    tpots = [(r.token_s[-1] - r.token_s[0]) / (len(r.token_s) - 1) for r in shorts if len(r.token_s) > 1]
    stalls = [b - a for a, b in stall_gaps(rs).values()]
    return {"ttft_short": _median([r.token_s[0] - r.sent_s for r in shorts]),
            "ttft_long": longs[0].token_s[0] - longs[0].sent_s if longs else None,
            "tpot_short": _median(tpots), "stall": _median(stalls)}


def when(iso: str) -> str:
    """An ISO date-time as a reader reads it: "2026-12-04 21:02 UTC" (the text itself when it is not one)."""
    from datetime import datetime

    try:
        t = datetime.fromisoformat(iso)
    except (TypeError, ValueError):
        return str(iso) or "an unknown time"
    return t.strftime("%Y-%m-%d %H:%M") + (" UTC" if t.utcoffset() is not None and not t.utcoffset() else "")


def fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if abs(seconds) >= 1:
        return f"{seconds:,.2f} s"
    return f"{seconds * 1e3:,.0f} ms" if abs(seconds) >= 0.1 else f"{seconds * 1e3:,.1f} ms"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:,.0f}%"


def _err(sim: float | None, meas: float | None) -> float | None:
    return abs(sim - meas) / meas if sim is not None and meas is not None and meas > 0 else None


ROWS = [("ttft_short", "TTFT, short streams (median)"),
        ("ttft_long", "TTFT, the long prompt"),
        ("tpot_short", "TPOT, short streams (median)"),
        ("stall", "Stall (median over the streams)")]


def summary_rows(run: EngineRun, simulated: dict[int, list[float]] | None,
                 comparison: dict[str, Any] | None) -> list[dict[str, str]]:
    """The table under a run: each figure measured, simulated, and the error between them (computed
    as |simulated - measured| / measured), then the simulator's median errors over every request."""
    measured = role_figures(rows(run))
    sim = role_figures(rows(run, simulated)) if simulated else {}
    out = []
    for key, label in ROWS:
        m, s = measured[key], sim.get(key)
        out.append({"": label, "measured": fmt_s(m), "simulated": fmt_s(s), "error (computed)": _pct(_err(s, m))})
    if comparison and comparison.get("requests"):
        n = comparison.get("requests")
        for key, label in (("ttft_error_median", "TTFT"), ("itl_error_median", "ITL")):
            out.append({"": f"{label} error, median of {n} requests", "measured": "", "simulated": "",
                        "error (computed)": _pct(comparison.get(key))})
    return out


def status_line(run: EngineRun, ended: str = "finished") -> str:
    """What an ended run holds, in the words a test can wait on: "Run finished: N requests, M
    tokens measured" (`ended`: "finished", "stopped", ...; a finished run with failed requests
    says "ended")."""
    tokens = sum(len(r.token_s) for r in run.requests)
    failed = sum(1 for r in run.requests if r.error)
    tail = f" ({failed} ended with an error)" if failed else ""
    if failed and ended == "finished":
        ended = "ended"
    return f"Run {ended}: {len(run.requests)} requests, {tokens:,} tokens measured{tail}."


def progress_line(run: EngineRun, clock_s: float) -> str:
    """A run in progress, in one line: requests ended, tokens so far, seconds in."""
    ended = sum(1 for r in run.requests if r.done or r.error)
    tokens = sum(len(r.token_s) for r in run.requests)
    return (f"Running: {ended} of {len(run.requests)} requests ended, {tokens:,} tokens measured so far, "
            f"{clock_s:,.1f} s in.")


def failures(run: EngineRun) -> str | None:
    """One sentence about the requests that failed, with the first one's reason; None when none did."""
    bad = [r for r in sorted(run.requests, key=lambda r: r.id) if r.error]
    if not bad:
        return None
    return (f"{len(bad)} of {len(run.requests)} requests did not finish: the first said \u201c{bad[0].error}\u201d. "
            "Every token they received before that is drawn.")


def run_error(run: EngineRun, request_id: int) -> str | None:
    return next((r.error for r in run.requests if r.id == request_id), None)


def _how_prefilled(budget: object, prompt_tokens: int) -> str:
    if not isinstance(budget, int) or budget <= 0:
        return "was prefilled"
    if budget >= prompt_tokens:
        return "was prefilled in one iteration"
    return f"was prefilled in chunks of at most {budget:,} tokens"


def verdict(entries: list[tuple[EngineRun, dict[int, list[float]] | None]]) -> str:
    """The stall in words: per setting, how long the streams waited and what the long prompt paid,
    then (for two settings) what chunking changed; every figure measured."""
    parts, seen = [], []
    for run, _ in entries:
        rs = rows(run)
        f = role_figures(rs)
        budget = run.settings.get("budget")
        where = f"With a budget of **{budget:,} tokens per iteration**" if isinstance(budget, int) else "On this engine"
        gap = typical_gap_s(rs)
        long = next((r for r in rs if r.role == LONG), None)
        if long is None:
            parts.append(f"{where} no long prompt ran, so there is no stall: only the streams' steady steps, "
                         f"a token every {fmt_s(gap)} (median gap, measured).")
            continue
        if not long.token_s:
            why = f" (it failed: {run_error(run, long.id)})" if run_error(run, long.id) else ""
            parts.append(f"{where} the long prompt never got its first token{why}, so no stall could be measured.")
            continue
        if f["stall"] is None:
            parts.append(f"{where} no stream was decoding while the long prompt was in the engine.")
            continue
        ratio = f", about {f['stall'] / gap:,.0f} times their usual gap" if gap and f["stall"] >= 2 * gap else ""
        parts.append(f"{where} the short streams ticked every {fmt_s(gap)} (median gap), then waited "
                     f"**{fmt_s(f['stall'])}**{ratio}, while the {long.prompt_tokens:,}-token prompt "
                     f"{_how_prefilled(budget, long.prompt_tokens)}; its own first token came "
                     f"**{fmt_s(f['ttft_long'])}** after it was sent. All measured.")
        seen.append((budget, f))
    if len(seen) == 2 and all(isinstance(b, int) for b, _ in seen):
        (b1, f1), (b2, f2) = sorted(seen, key=lambda x: -x[0])
        parts.append(f"So going from {b1:,} to {b2:,} tokens per iteration changed the stall from {fmt_s(f1['stall'])} "
                     f"to {fmt_s(f2['stall'])} and the long prompt's wait for its first token from "
                     f"{fmt_s(f1['ttft_long'])} to {fmt_s(f2['ttft_long'])}.")
    return "\n\n".join(parts)
