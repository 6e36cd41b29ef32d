"""The per-request cost an engine pays outside its forward passes (HTTP, tokenizing), told apart from
a forward's own fixed cost by prompts sent together (core.engines.fit.probe_concurrent).

It lives apart from core.engines.fit because it runs the simulator (core.sim.simulate), which itself
reads saved fits: fit stays below the simulator, this module above both.
"""

from __future__ import annotations

from core.engines.base import EngineError
from core.engines.fit import (
    CONCURRENT_PROMPT,
    REQUEST_COST_GRID_S,
    embedded_spec,
    fit_engine,
    predicted_s,
)
from core.engines.launch import EngineSetting
from core.predictor import Predictor
from core.sim.workload import Request


def simulated_ttfts(predictor: Predictor, setting: EngineSetting, k: int, request_cost_s: float) -> list[float]:
    """The simulator's TTFTs, sorted, for k CONCURRENT_PROMPT-token prompts sent together to an engine
    with this fit, budget, sequence limit and per-request cost."""
    from core.deployment import Scenario
    from core.sim.simulate import SimConfig, simulate
    from core.sim.steptime import StepTime

    spec = embedded_spec()
    scenario = Scenario(batch=1, prompt_len=1, gen_len=1, weight_dtype=predictor.dtype, tp=1).resolved()
    step = StepTime.fit(spec, predictor.hardware, scenario, predictor)
    config = SimConfig(policy="chunked", requests=k, model="smollm2-135m", dtype=predictor.dtype, instances=1,
                       budget=max(16, setting.budget), max_batch=setting.max_seqs, kv_blocks=100_000,
                       request_overhead_s=request_cost_s)
    result = simulate(config, [Request(i, 0.0, CONCURRENT_PROMPT, 1) for i in range(k)], step=step,
                      deployed=(spec, predictor.hardware, scenario))
    return sorted(t[0] for t in result.token_s if t)


def fit_with_request_cost(samples: list[tuple[dict | list[dict], str, float]],
                          concurrent: list[tuple[int, list[float]]], setting: EngineSetting
                          ) -> tuple[Predictor, float]:
    """The fit and the per-request cost that together best match both the forwards (a prefill probe's
    TTFT is the cost plus its forwards) and the concurrent prompts' TTFTs, searched over
    REQUEST_COST_GRID_S. Without concurrent samples the cost is 0 and the fit is fit_engine's."""
    if not concurrent:
        return fit_engine(samples, setting), 0.0
    best: tuple[float, Predictor, float] | None = None
    for cost in REQUEST_COST_GRID_S:
        shifted = [(c, p, m - cost if p == "prefill" else m) for c, p, m in samples]
        if any(m <= 0 for _, _, m in shifted):
            break
        try:
            pred = fit_engine(shifted, setting)
        except EngineError:
            continue
        errors = [abs(predicted_s(pred, c, p) - m) / m for c, p, m in shifted]
        for k, measured in concurrent:
            sim = simulated_ttfts(pred, setting, k, cost)
            errors += [abs(s - m) / m for s, m in zip(sim, measured, strict=False) if m > 0]
        score = sum(errors) / len(errors)
        if best is None or score < best[0]:
            best = (score, pred, cost)
    if best is None:
        return fit_engine(samples, setting), 0.0
    return best[1], best[2]
