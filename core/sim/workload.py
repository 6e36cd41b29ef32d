"""What arrives at the simulated server: requests with an arrival time and their token counts.

Requests come from a preset workload (assets/sim/workloads.json) at a chosen rate, or from an
uploaded arrival file replayed as it is.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Request:
    """One request: when it arrives, how long its prompt is, and how many tokens it will generate.

    The output length is known in advance because a simulation replays a workload; a real server
    learns it only when the model stops.
    """

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    # What the prompt shares with others, when the source says (Mooncake's hash_ids: one id per
    # PREFIX_BLOCK_TOKENS-token block; two prompts with the same leading ids share that prefix).
    blocks: tuple[int, ...] = ()
    # What the prompt is made of, when a generator says: (content id, tokens) pieces in order, their
    # tokens summing to the prompt's; two prompts share a prefix as far as their pieces agree.
    segments: tuple[tuple[int, int], ...] = ()
    answer_id: int | None = None  # the content id its answer goes by (a later turn re-sends it); None: its own
    # A conversation's later turn: sent `think_s` after the answer of request `follows` ends (decided
    # while simulating; `arrival_s` is then only a placeholder no earlier than that request's).
    follows: int | None = None
    think_s: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.id, bool) or not isinstance(self.id, int) or self.id < 0:
            raise ValueError(f"request id must be a non-negative integer, got {self.id!r}")
        arrival = self.arrival_s
        if isinstance(arrival, bool) or not isinstance(arrival, (int, float)) or not math.isfinite(arrival) \
                or arrival < 0:
            raise ValueError(f"request {self.id}: arrival_s must be a finite time >= 0, got {arrival!r}")
        for field_name in ("prompt_tokens", "output_tokens"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"request {self.id}: {field_name} must be a positive integer, got {value!r}")
        if self.segments and sum(n for _, n in self.segments) != self.prompt_tokens:
            raise ValueError(f"request {self.id}: its prompt's pieces hold {sum(n for _, n in self.segments):,} "
                             f"tokens, not its {self.prompt_tokens:,}")
        if self.blocks and len(self.blocks) != -(-self.prompt_tokens // PREFIX_BLOCK_TOKENS):
            raise ValueError(f"request {self.id}: a {self.prompt_tokens:,}-token prompt has "
                             f"{-(-self.prompt_tokens // PREFIX_BLOCK_TOKENS):,} blocks of {PREFIX_BLOCK_TOKENS} "
                             f"tokens, so {len(self.blocks):,} block ids do not fit it")


# --- workloads: presets as data, arrivals, lengths ------------------------------------------

WORKLOADS_FILE = Path(__file__).resolve().parents[2] / "assets" / "sim" / "workloads.json"
ARRIVALS = ("poisson", "bursty")
BURSTY_SHAPE = 0.25  # gamma shape of bursty inter-arrival gaps: coefficient of variation 2, as vLLM's --burstiness
MAX_REQUESTS = 20_000
MAX_UPLOAD_BYTES = 2_000_000  # the page's upload box
MAX_FILE_BYTES = 64_000_000  # `simulate --arrivals FILE`: a local file may be larger, not unbounded
PREFIX_BLOCK_TOKENS = 512  # Mooncake's hash_ids: one id per 512 prompt tokens
MAX_BLOCK_ID = 2**53  # ids stay exact as JSON numbers
MAX_TOKENS = 1_000_000


@dataclass(frozen=True)
class Lengths:
    """A log-normal token count with a median and a spread (sigma of the log), clipped to [low, high]."""

    median: float
    sigma: float
    low: int
    high: int

    def __post_init__(self) -> None:
        if not (1 <= self.low <= self.high <= MAX_TOKENS):
            raise ValueError(f"length bounds must satisfy 1 <= min <= max <= {MAX_TOKENS:,}, got {self.low}..{self.high}")
        if not (math.isfinite(self.median) and self.median >= 1):
            raise ValueError(f"a median length must be at least 1 token, got {self.median!r}")
        if not (math.isfinite(self.sigma) and 0 <= self.sigma <= 3):
            raise ValueError(f"a length spread must be between 0 and 3, got {self.sigma!r}")

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        values = self.median * np.exp(self.sigma * rng.standard_normal(n))
        return np.clip(np.rint(values), self.low, self.high).astype(int)


@dataclass(frozen=True)
class Component:
    share: float
    prompt: Lengths
    output: Lengths


@dataclass(frozen=True)
class Workload:
    """A named request mix and its default arrival rate (near saturation for the default deployment)."""

    name: str
    label: str
    rate_per_s: float
    components: tuple[Component, ...]

    def scaled(self, prompt_scale: float = 1.0, output_scale: float = 1.0) -> Workload:
        """The same mix with every prompt (or output) median multiplied: the custom-length knob."""
        def scale(length: Lengths, k: float) -> Lengths:
            high = min(MAX_TOKENS, max(length.low, round(length.high * k)))
            return Lengths(length.median * k, length.sigma, min(length.low, high), high)
        return Workload(self.name, self.label, self.rate_per_s,
                        tuple(Component(c.share, scale(c.prompt, prompt_scale), scale(c.output, output_scale))
                              for c in self.components))


def custom(base: Workload, prompt_median: float | None, output_median: float | None,
           sigma: float | None) -> Workload:
    """A single-component workload of the reader's own lengths (log-normal, clipped to 1 .. 131,072),
    at `base`'s rate: any length left None keeps base's (its first component's)."""
    first = base.components[0]

    def pick(length: Lengths, median: float | None) -> Lengths:
        if median is None and sigma is None:
            return length
        return Lengths(float(median if median is not None else length.median),
                       float(sigma if sigma is not None else length.sigma), 1, 131_072)

    return Workload("custom", f"Custom lengths (rate of {base.name})", base.rate_per_s,
                    (Component(1.0, pick(first.prompt, prompt_median), pick(first.output, output_median)),))


def _lengths(d: dict[str, Any]) -> Lengths:
    return Lengths(float(d["median"]), float(d["sigma"]), int(d["min"]), int(d["max"]))


def load_workloads() -> dict[str, Workload]:
    """Every preset workload in assets/sim/workloads.json, by name."""
    raw = json.loads(WORKLOADS_FILE.read_text())
    out = {}
    for name, d in raw.items():
        if name.startswith("_"):
            continue
        comps = tuple(Component(float(c["share"]), _lengths(c["prompt"]), _lengths(c["output"])) for c in d["mix"])
        out[name] = Workload(name, d["label"], float(d["rate_per_s"]), comps)
    return out


def get_workload(name: str) -> Workload:
    workloads = load_workloads()
    if name not in workloads:
        raise ValueError(f"unknown workload {name!r}; known: {', '.join(sorted(workloads))}")
    return workloads[name]


def generate(workload: Workload, n: int, rate_per_s: float, seed: int = 0, arrival: str = "poisson",
             max_context: int | None = None) -> list[Request]:
    """`n` requests of `workload` arriving at `rate_per_s` on average, reproducible from `seed`.

    Poisson: exponential gaps. Bursty: gamma gaps of the same mean and shape 0.25, so requests come
    in clumps with quiet spells between. `max_context` clips prompt + output to a model's window.
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_REQUESTS:
        raise ValueError(f"number of requests must be a whole number from 1 to {MAX_REQUESTS:,}, got {n!r}")
    if not (isinstance(rate_per_s, (int, float)) and math.isfinite(rate_per_s) and 0 < rate_per_s <= 1e5):
        raise ValueError(f"arrival rate must be a positive number of requests per second, got {rate_per_s!r}")
    if arrival not in ARRIVALS:
        raise ValueError(f"unknown arrival pattern {arrival!r}; known: {', '.join(ARRIVALS)}")
    rng = np.random.default_rng(seed)
    mean_gap = 1.0 / rate_per_s
    gaps = (rng.exponential(mean_gap, n) if arrival == "poisson"
            else rng.gamma(BURSTY_SHAPE, mean_gap / BURSTY_SHAPE, n))
    times = np.cumsum(gaps) - gaps[0]  # the first request arrives at t = 0
    shares = np.array([c.share for c in workload.components], dtype=float)
    which = rng.choice(len(shares), size=n, p=shares / shares.sum())
    prompts, outputs = np.empty(n, dtype=int), np.empty(n, dtype=int)
    for k, comp in enumerate(workload.components):
        mask = which == k
        prompts[mask] = comp.prompt.draw(rng, int(mask.sum()))
        outputs[mask] = comp.output.draw(rng, int(mask.sum()))
    if max_context is not None:
        prompts = np.minimum(prompts, max_context - 1)
        outputs = np.maximum(1, np.minimum(outputs, max_context + 1 - prompts))
    return [Request(i, float(t), int(p), int(o)) for i, (t, p, o) in enumerate(zip(times, prompts, outputs, strict=True))]


# The arrival formats, told apart by their keys (JSONL) or header (CSV): this project's own, the
# Mooncake trace's (timestamp in ms from the start, input_length, output_length, hash_ids), and the
# Azure LLM inference trace's CSV (TIMESTAMP as a date-time, ContextTokens, GeneratedTokens).
OWN_FIELDS = ("arrival_s", "prompt_tokens", "output_tokens")
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
AZURE_FIELDS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def read_arrivals(data: bytes, filename: str = "arrivals.jsonl", max_bytes: int | None = MAX_UPLOAD_BYTES
                  ) -> list[Request]:
    """Requests from an arrival file: JSONL (one object per line: arrival_s, prompt_tokens,
    output_tokens; or Mooncake's timestamp, input_length, output_length, hash_ids) or CSV (this
    project's columns, or the Azure trace's). Untrusted: capped in size (`max_bytes`: the upload
    box's by default) and count, and every malformed line is refused with its line number.
    Returned sorted by arrival, renumbered from 0."""
    if max_bytes is not None and len(data) > max_bytes:
        raise ValueError(f"the arrival file is {len(data):,} bytes; the limit is {max_bytes:,}")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError("the arrival file is not UTF-8 text (expected JSONL or CSV)") from None
    if filename.lower().endswith(".csv"):
        fmt, records = _csv_records(text)
    else:
        records = _jsonl_records(text)
        fmt = "mooncake" if records and "timestamp" in records[0][1] and "arrival_s" not in records[0][1] else "own"
    if not records:
        raise ValueError("the arrival file holds no requests")
    if len(records) > MAX_REQUESTS:
        raise ValueError(f"the arrival file holds {len(records):,} requests; the limit is {MAX_REQUESTS:,}")
    fields, parse = {"own": (OWN_FIELDS, _own), "mooncake": (MOONCAKE_FIELDS, _mooncake),
                     "azure": (AZURE_FIELDS, _azure)}[fmt]
    out = []
    for k, (line, rec) in enumerate(records):
        try:
            out.append(parse(k, rec))
        except KeyError as exc:
            raise ValueError(f"line {line}: missing {exc.args[0]!r} (each request needs {', '.join(fields)})") from None
        except (TypeError, ValueError, OverflowError) as exc:  # overflow: a number too big for a float
            raise ValueError(f"line {line}: {str(exc)[:200]}") from None
    if fmt == "azure":  # date-times: the first request arrives at 0
        start = min(r.arrival_s for r in out)
        out = [Request(r.id, r.arrival_s - start, r.prompt_tokens, r.output_tokens) for r in out]
    out.sort(key=lambda r: (r.arrival_s, r.id))
    return [replace(r, id=i) for i, r in enumerate(out)]


def _csv_records(text: str) -> tuple[str, list[tuple[int, dict[str, Any]]]]:
    reader = csv.DictReader(io.StringIO(text))
    try:  # the header is read here: a field past the csv module's limit raises now
        header = reader.fieldnames or []
        fmt = "azure" if all(f in header for f in AZURE_FIELDS) else "own"
        missing = [f for f in OWN_FIELDS if f not in header]
        if fmt == "own" and missing:
            raise ValueError(f"the CSV needs the columns {', '.join(OWN_FIELDS)} (or the Azure trace's "
                             f"{', '.join(AZURE_FIELDS)}); missing: {', '.join(missing)}")
        if text.count("\n") > MAX_REQUESTS + 1:  # before every row is read into memory
            raise ValueError(f"the arrival file holds more than {MAX_REQUESTS:,} requests; the limit is "
                             f"{MAX_REQUESTS:,}")
        return fmt, [(i + 2, row) for i, row in enumerate(reader)]
    except csv.Error as exc:
        raise ValueError(f"the CSV could not be read: {exc}") from None


def _jsonl_records(text: str) -> list[tuple[int, dict[str, Any]]]:
    records = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if len(records) >= MAX_REQUESTS:
            raise ValueError(f"the arrival file holds more than {MAX_REQUESTS:,} requests; the limit is "
                             f"{MAX_REQUESTS:,}")
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {i} is not JSON ({exc.msg}); expected one object per line") from None
        except RecursionError:
            raise ValueError(f"line {i} is nested too deeply; expected one flat object per line") from None
        except ValueError as exc:  # a number of thousands of digits (Python's int conversion limit)
            raise ValueError(f"line {i} holds a number far too long ({str(exc)[:80]})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"line {i} is not a JSON object")
        records.append((i, obj))
    return records


def _counts(prompt: Any, output: Any) -> tuple[int, int]:
    prompt, output = _whole(prompt), _whole(output)
    if prompt > MAX_TOKENS or output > MAX_TOKENS:
        raise ValueError(f"token counts above {MAX_TOKENS:,}")
    return prompt, output


def _own(k: int, rec: dict[str, Any]) -> Request:
    arrival = float(rec["arrival_s"])
    return Request(k, arrival, *_counts(rec["prompt_tokens"], rec["output_tokens"]))


def _mooncake(k: int, rec: dict[str, Any]) -> Request:
    stamp = rec["timestamp"]
    if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not math.isfinite(stamp) or stamp < 0:
        raise ValueError(f"timestamp must be a number of milliseconds from 0, got {str(stamp)[:40]!r}")
    prompt, output = _counts(rec["input_length"], rec["output_length"])
    ids = rec["hash_ids"]
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) and 0 <= h <= MAX_BLOCK_ID
                                            for h in ids):
        raise ValueError("hash_ids must be a list of whole numbers from 0 (one per 512-token block of the prompt)")
    blocks = -(-prompt // PREFIX_BLOCK_TOKENS)
    if len(ids) != blocks:
        raise ValueError(f"hash_ids holds {len(ids):,} ids; a {prompt:,}-token prompt has {blocks:,} blocks of "
                         f"{PREFIX_BLOCK_TOKENS} tokens, one id each")
    return Request(k, float(stamp) / 1000.0, prompt, output, tuple(ids))


def _azure(k: int, rec: dict[str, Any]) -> Request:
    import datetime as _dt

    stamp = str(rec["TIMESTAMP"] or "").strip()
    whole, _, fraction = stamp.partition(".")
    try:
        when = _dt.datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=_dt.UTC)
        if fraction and not fraction.isdigit():
            raise ValueError
    except ValueError:
        raise ValueError(f"TIMESTAMP must read like 2023-11-16 18:17:03.9799600, got {stamp[:40]!r}") from None
    seconds = when.timestamp() + (int(fraction) / 10 ** len(fraction) if fraction else 0.0)
    return Request(k, seconds, *_counts(rec["ContextTokens"], rec["GeneratedTokens"]))


def _whole(value: Any) -> int:
    """A token count from JSON or CSV text: a whole number (2 and "2" and 2.0 are fine, 2.5 and true
    are not)."""
    if isinstance(value, bool):
        raise ValueError(f"token counts must be whole numbers, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number != int(number):
        raise ValueError(f"token counts must be whole numbers, got {str(value)[:40]!r}")
    return int(number)
