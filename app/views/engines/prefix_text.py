"""The prefix-cache experiment's words: fixed text, and sentences built from one run's numbers (plain
functions, testable without a browser). Which sentence to show is decided in app.views.engines.prefix."""

from __future__ import annotations

from statistics import median

from core.engines.kv_events import BlockTable

INTRO = """**A follow-up re-sends the whole conversation; an engine that kept the cache computes only
what it has not seen.** This engine runs with its prefix cache on. **Play the conversations** sends
three conversations of four turns at once: each follow-up re-sends the earlier prompts and the
engine's own answers, plus a new 64-token message. The engine's KV blocks appear as its events
report them; when the run ends, the simulator's prefix cache is drawn under them for the same turns."""

HOW = """**How we know.**
- *The engine's blocks* come from its own KV cache events (`--kv-events-config`): each `BlockStored`
  event names a full block by hash, the block before it and its tokens; `BlockRemoved` takes one
  away. A chain is placed in the conversation whose prompt holds its first block's tokens; a block's
  turn is the last turn of that conversation sent before the event's time stamp. A block that is
  reused stores nothing (vLLM's default report mode), so reuse is read from the engine's counters
  (`vllm:prefix_cache_queries_total` and `vllm:prefix_cache_hits_total`, in tokens).
- *A turn's blocks*: a block is kept once all its positions are computed. The last token a turn
  samples is never fed back, so a turn of P prompt tokens and N answer tokens fills
  floor((P + N − 1) / block size) blocks; the next turn reuses them all and stores the rest.
- *The simulator's blocks* are its prefix cache's (vLLM v1's rules: blocks named by their chain,
  findable once full, least recently freed overwritten first), for the same turns sent at their
  measured times, priced with this engine's fit. Its TTFT without the cache is the same simulation
  with the cache off: what the engine would have paid for every follow-up from scratch.
- Each run uses new random prompts, so nothing an earlier run left in the engine's cache can hit."""

NO_EVENTS_ENGINE = ("**Prefix caching, live**: pick the engine marked *prefix cache on* above to watch a real "
                    "prefix cache fill block by block, as its KV events report it, beside the simulator's.")


def ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1000:,.0f} ms"


def turn_median(turns: list[dict], key: str, first: bool, per_conversation: int) -> float | None:
    values = [t[key] for t in turns if (t["id"] % per_conversation == 0) == first and t.get(key) is not None]
    return median(values) if values else None


def answer(comparison: dict, per_conversation: int) -> str:
    """The run's answer in two sentences: what the engine reused, and what that did to TTFT."""
    turns = comparison["turns"]
    first = turn_median(turns, "ttft_measured_s", True, per_conversation)
    later = turn_median(turns, "ttft_measured_s", False, per_conversation)
    cold = turn_median(turns, "ttft_without_cache_simulated_s", False, per_conversation)
    hits, queries = comparison.get("hit_tokens_measured"), comparison.get("queries_measured")
    reused = (f"The engine reused **{hits:,.0f} of the {queries:,.0f} prompt tokens** it was sent "
              f"({hits / queries:.0%}, its own counters, measured); the simulator predicted "
              f"{comparison['hit_tokens_simulated']:,}." if hits is not None and queries else
              f"The simulator predicts {comparison['hit_tokens_simulated']:,} reused prompt tokens; the engine "
              "published no counters to measure its own.")
    return (f"{reused} Follow-ups got their first token in **{ms(later)}** against {ms(first)} for an opening "
            f"turn (medians, measured), though their prompts were longer; without the cache the simulator puts "
            f"them at {ms(cold)}.")


def blocks_line(table: BlockTable, chains: int, placed: dict[str, int] | None) -> str:
    """What the engine stored, and how much of it the simulator holds in the same places."""
    size = f" of {table.block_size:,} tokens" if table.block_size else ""
    line = (f"The engine stored **{table.stored:,} blocks{size}** in {chains:,} chain{'s' if chains != 1 else ''} "
            f"({table.messages:,} event messages, measured).")
    if placed is not None:
        line += (f" The simulator holds {placed['simulated']:,}; **{placed['same']:,} sit in the same conversation, "
                 f"place and turn** in both (simulated against measured).")
    return line


def stream_problems(table: BlockTable) -> list[str]:
    """A sentence for each way the event stream fell short, for the page to warn with."""
    out = []
    if table.lost:
        out.append(f"{table.lost:,} event message{'s' if table.lost != 1 else ''} never arrived (the page fell "
                   "behind the engine, or joined late): the drawing may miss blocks. The engine's counters are "
                   "unaffected.")
    if table.bad:
        shown = "; ".join(table.problems[:3])
        out.append(f"{table.bad:,} event message{'s' if table.bad != 1 else ''} could not be read and "
                   f"{'were' if table.bad != 1 else 'was'} skipped ({shown}).")
    return out
