"""The serving page's words: its intro, each policy's sentence, definitions, the verdict comparing two
simulations and the table of their metrics. Every number in them comes from the results passed in."""

from __future__ import annotations

from app.views.serving.jobs import offered_rate
from core.sim.policies import POLICIES
from core.sim.simulate import BLOCK_TOKENS, SimConfig, SimResult

TITLE = "Serving: why prefill and decode are scheduled apart"


METRIC_ROWS = [("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2E", "e2e")]


INTRO = """A server never answers one request at a time. Dozens arrive every second, and every
iteration of the model (one forward pass) can carry rows from many of them: some still **prefilling**
their prompt, most **decoding** one token each. The **scheduler** decides, iteration by iteration,
which rows ride together. A prefill of a long prompt is a heavy, compute-bound forward; a decode is
light and limited by memory bandwidth. Put a 6,000-token prefill in the same iteration as thirty
decodes and all thirty users wait for it: that is the stall this page lets you watch, and the reason
serving systems treat the two phases differently."""


POLICY_TEXT = {
    "static": "**Static batching** takes a batch of waiting requests when the server is idle, pads every "
              "prompt to the longest, and runs the batch until its last answer is done. Nobody joins mid-way, "
              "and finished answers keep their slot (their tokens are computed and thrown away).",
    "prefill-first": "**Prefill first** (continuous batching) puts a new prompt into the very next iteration, "
                     "whole, ahead of the running decodes: requests start fast, but each long prompt freezes "
                     "every other user's next token while it is prefilled.",
    "decode-first": "**Decode first** never delays a running decode: a new prompt is prefilled only when no "
                    "decode is left to run. Tokens flow evenly for those inside, and newcomers wait outside.",
    "chunked": "**Chunked prefill** (Sarathi-Serve) gives each iteration a token budget: one token for every "
               "running decode first, then slices of waiting prompts fill the rest. A long prompt is spread "
               "over many iterations, each only a little slower than a plain decode step.",
    "disaggregated": "**Disaggregated** serving puts prefill and decode on different GPUs: prefill servers only "
                     "prefill, then send each request's KV cache over the GPU link to a decode server, which "
                     "only decodes. No prompt ever shares an iteration with a decode.",
}


DEFINITIONS = """Definitions, as `vllm bench serve` reports them, all **simulated**:
**TTFT** (time to first token) runs from a request's arrival to its first output token, queueing
included. **TPOT** (time per output token) is each request's (E2E − TTFT) / (n − 1) for n output
tokens: its mean gap after the first. **ITL** (inter-token latency) is every single gap between two
consecutive tokens, so its p99 catches the stalls a mean hides. **E2E** is arrival to last token.
p50 / p90 / p99 are the values half, 90% and 99% of requests (or gaps) stay at or below.
**Throughput** is output tokens over the makespan (first arrival to last token); **goodput** counts
only the requests per second that met both targets."""


HOW = f"""Each iteration's duration is the what-if page's prediction for exactly the rows it holds: one
forward whose weights are streamed once for all rows, plus every row's own arithmetic, KV-cache
reads and writes, plus a fixed overhead per forward (and the all-reduces when a copy spans several
GPUs). Prices come from the GPU's datasheet times assumed efficiencies (80% of the bandwidth, 60%
of the matrix-multiply peak), so they are a model of a well-tuned engine, not a measurement. KV
memory is paged in blocks of 16 tokens out of 90% of the GPUs' memory less the weights (vLLM's
default); a request waits while its prompt's blocks are not free, and when a decode needs a block
and none is left, the most recently admitted request is **preempted**: its cache is thrown away and
recomputed later. Output lengths are known to the simulator in advance (it replays a workload); a
real server learns them only when the model stops. The live page measures a real model on this
server; the engine lab will compare this simulator with a real serving engine.

With **prefix caching** on, each copy keeps its full KV blocks named by what they hold (the block
before and its tokens), as vLLM's automatic prefix caching does: a prompt that starts like an earlier
one reuses those blocks and prefills only the rest (at least one token is always computed); freed
blocks stay cached until memory needs them, the least recently freed going first. What prompts share
comes from the workload: Mooncake's recorded block ids say which prompts start alike; the synthetic
mixes and the Azure traces share nothing. With several copies, a prefix-aware router sends a request
where its start is cached unless that copy's queue is more than {SimConfig.router_queue_bound} requests longer than the shortest."""


def ms(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds >= 1:
        return f"{seconds:,.2f} s"
    return f"{seconds * 1e3:,.1f} ms"


def label(policy: str) -> str:
    return POLICIES[policy].label or policy


def policy_sentence(name: str) -> str:
    """The page's sentence for a policy; a policy the page has no words for yet gets its class's line."""
    cls = POLICIES[name]
    return POLICY_TEXT.get(name) or f"**{cls.label or name}**: {cls.description}."


def unserved(result: SimResult) -> str | None:
    """Why some requests got no token, in the reader's words (None when every request was served):
    a KV cache too small for a request's prompt is the one way the simulator turns one away."""
    m = result.metrics
    missing = m["requests"] - m["served"]
    if missing <= 0:
        return None
    blocks = result.kv_blocks_per_server
    tokens = blocks * BLOCK_TOKENS
    smallest = min(r.prompt_tokens + r.output_tokens - 1 for r in result.requests)
    whom = "No request" if m["served"] == 0 else f"{missing:,} of {m['requests']:,} requests"
    return (f"{whom} could be served: each model copy's KV cache holds {blocks:,} block{'s' * (blocks != 1)} of "
            f"{BLOCK_TOKENS} tokens ({tokens:,} tokens), and a request is turned away unless its whole cache fits: "
            f"its prompt and all but its last output token (the smallest here: {smallest:,} tokens). Raise the KV "
            "capacity (0 sizes it from the memory left after the weights) or shorten the prompts. The charts below are drawn from what was served.")


def verdict(ra: SimResult, rb: SimResult, source: str | None = None) -> str:
    """The comparison in words, every number from the two results."""
    ma, mb = ra.metrics, rb.metrics
    la, lb = label(ra.config.policy), label(rb.config.policy)
    lines = []
    n = len(ra.requests)
    cfg = ra.config
    if source is None and ra.played is not None:
        p = ra.played
        speed = "as recorded" if p.time_scale == 1 else f"at {p.time_scale:g}× its recorded rate"
        source = (f"recorded traffic: {p.recording.short}, from minute {p.window_start_s / 60:g} of it, {speed}: "
                  f"about {offered_rate(cfg):.3g} per second")
    elif source is None:
        custom = (cfg.prompt_median, cfg.output_median, cfg.length_sigma) != (None, None, None)
        source = f"{'custom lengths' if custom else cfg.workload}, about {offered_rate(cfg):g} per second"
    lines.append(f"**{n:,} requests** ({source}) on the same arrivals for both. All figures simulated.")
    if ra.left_out:
        lines[0] += (f" {ra.left_out:,} more {'was' if ra.left_out == 1 else 'were'} left out: longer than "
                     f"{cfg.model}'s context window.")

    def compare(metric: str, what: str, better_low: bool = True) -> str:
        x, y = ma[metric], mb[metric]
        if x is None or y is None or x == y:
            return f"{what}: {ms(x)} under {la}, {ms(y)} under {lb}."
        low, high = (la, lb) if x < y else (lb, la)
        ratio = max(x, y) / min(x, y) if min(x, y) > 0 else float("inf")
        return f"{what}: **{low}** {ms(min(x, y))} against {high} {ms(max(x, y))} (×{ratio:,.1f})."

    lines.append(compare("ttft_p50_s", "Median wait for the first token"))
    lines.append(compare("tpot_p99_s", "p99 time per output token"))
    lines.append(compare("itl_p99_s", "p99 gap between two tokens (the stalls)"))
    if None not in (ma["ttft_p50_s"], mb["ttft_p50_s"], ma["tpot_p99_s"], mb["tpot_p99_s"]):
        sooner = la if ma["ttft_p50_s"] < mb["ttft_p50_s"] else lb
        smoother = la if ma["tpot_p99_s"] < mb["tpot_p99_s"] else lb
        if sooner != smoother:
            lines.append(f"Neither wins both: **{sooner}** starts answers sooner, **{smoother}** keeps them "
                         "flowing. Which matters more is what the TTFT and TPOT targets (and goodput) decide.")
    ta, tb = ma["throughput_tok_s"] or 0.0, mb["throughput_tok_s"] or 0.0
    if ta and tb:
        lines.append(f"Throughput: {ta:,.0f} against {tb:,.0f} output tokens per second "
                     f"({'within 5%' if abs(ta - tb) <= 0.05 * max(ta, tb) else 'different'}).")
    return " ".join(lines[:1]) + "\n\n" + "\n".join(f"- {line}" for line in lines[1:])


def prefix_line(result: SimResult) -> str | None:
    """One line on the prefix cache when it is on: how much of the prompts it saved, and the router."""
    if not result.config.prefix_cache:
        return None
    from core.sim.routers import get_router

    router = get_router(result.config.router).label
    copies = f"; {router.lower()} router" if result.config.instances > 1 else ""
    return (f"Prefix cache: {result.prefix_hit_rate():.1%} of prompt tokens reused "
            f"({result.prefix_hit_tokens():,} tokens not prefilled again{copies}; simulated).")


def metric_rows(ra: SimResult, rb: SimResult, names: list[str]) -> list[dict[str, str]]:
    rows = []
    for label, key in METRIC_ROWS:
        for q in ("p50", "p90", "p99"):
            rows.append({"metric (simulated)": f"{label} {q}", names[0]: ms(ra.metrics[f"{key}_{q}_s"]),
                         names[1]: ms(rb.metrics[f"{key}_{q}_s"])})
    for label, key, fmt in (("throughput (output tokens/s)", "throughput_tok_s", "{:,.0f}"),
                            ("goodput (requests/s)", "goodput_req_s", "{:,.2f}")):
        rows.append({"metric (simulated)": label,
                     **{n: fmt.format(r.metrics[key]) if r.metrics[key] is not None else "–"
                        for n, r in zip(names, (ra, rb), strict=True)}})
    rows.append({"metric (simulated)": "preemptions",
                 **{n: f"{r.to_dict()['preemptions']:,}" for n, r in zip(names, (ra, rb), strict=True)}})
    if ra.config.prefix_cache:
        rows.append({"metric (simulated)": "prefix cache: prompt tokens reused",
                     **{n: f"{r.prefix_hit_rate():.1%}" for n, r in zip(names, (ra, rb), strict=True)}})
    return rows
