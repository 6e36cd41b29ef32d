"""Cost and predicted time of a whole generation without running a model (`python -m core estimate`).

On a datasheet machine this is an adapter over the what-if answer (core.whatif.answer): its times,
all-reduces and memory, beside the FLOP and byte counts of core.cost.estimate. On "host" (this
machine, calibrated) the calibrated predictor prices the same counts, decode summed in closed form by
core.deployment.decode_time_s, the what-if page's one timer for a whole generation.
"""

from __future__ import annotations

from typing import Any

from core.cost import estimate, forward_cost
from core.deployment import decode_time_s
from core.dtypes import default_companion_dtype, normalize_dtype
from core.predictor import predictor_for
from core.spec import load_model_preset


def estimate_run(model: str, hardware: str, prompt_len: int, gen_len: int, batch: int = 1,
                 dtype: str = "bf16", kv_dtype: str | None = None, measure: bool = False,
                 tp: int = 1) -> dict[str, Any]:
    """The whole generation's cost and predicted time; `measure` lets "host" be calibrated now.

    `tp` > 1 splits the model over that many devices of a datasheet preset (core.whatif prices the
    split and its all-reduces); the times are then per device, and "fits" is per device too. A
    model that does not fit is still priced: "fits" is False and "shortfall_bytes" says by how much.
    A latent-attention model is priced in the form its machine would run (core.cost.MLA_FORMS):
    transformers' on "host", a serving engine's on a datasheet preset; "mla_form" says which.
    """
    if prompt_len < 1 or gen_len < 1 or batch < 1:
        raise ValueError("--prompt-len, --gen-len and --batch must be at least 1")
    spec = load_model_preset(model)
    if prompt_len + gen_len - 1 > spec.max_positions:
        raise ValueError(f"prompt-len + gen-len - 1 = {prompt_len + gen_len - 1} exceeds {spec.name}'s "
                         f"context window of {spec.max_positions}")
    if tp != 1 and hardware == "host":
        raise ValueError("--tp needs a datasheet preset: 'host' is this one machine")
    w_dt = normalize_dtype(dtype)
    kv_dt = normalize_dtype(kv_dtype) if kv_dtype else default_companion_dtype(w_dt)
    # latent attention runs as this project's runner runs it on "host", as serving engines do elsewhere
    mla_form = "transformers" if hardware == "host" else "serving"
    result = estimate(spec, prompt_len, gen_len, batch, w_dt, kv_dt, mla_form=mla_form)
    pred = predictor_for(spec, hardware, w_dt, measure=measure)
    kwargs = {"weight_dtype": w_dt, "kv_dtype": kv_dt, "lm_head_tokens": 1, "mla_form": mla_form}
    prefill_cost = forward_cost(spec, prompt_len, 0, batch, **kwargs)
    result["prefill"]["intensity"] = prefill_cost.intensity
    result["model"] = spec.name
    result["hardware"] = hardware
    result["batch"] = batch
    result["predictor"] = pred.describe()
    result["tp"] = tp
    if hardware == "host":  # this machine, calibrated: its predictor prices the generation directly
        steps = gen_len - 1
        decode_time = decode_time_s(pred, result["decode"], batch)
        _times(result, pred.predict_s(prefill_cost, "prefill"), decode_time, decode_time / steps if steps else None)
        _host_memory(result, spec, batch, prompt_len, w_dt, measure)
    else:  # a datasheet machine: the what-if answer, read as this command's fields
        _from_answer(result, spec, hardware, prompt_len, gen_len, batch, w_dt, kv_dt, tp)
    return result


def _times(result: dict[str, Any], ttft: float, decode: float, tpot: float | None) -> None:
    result["ttft_s"] = result["prefill"]["time_s"] = ttft
    result["decode"]["time_s"], result["decode"]["tpot_s"] = decode, tpot
    result["total_s"] = ttft + decode


def _host_memory(result: dict[str, Any], spec: Any, batch: int, prompt_len: int, w_dt: str, measure: bool) -> None:
    """The host's memory against the weights, the final cache and the prefill's activations."""
    from core import deployment
    from core.calibrate import resolve_hardware

    hw = resolve_hardware("host", measure=measure)
    a = default_companion_dtype(w_dt)
    need = (deployment.weight_memory_bytes(spec, w_dt, a) + result["kv_bytes_final"]
            + deployment.activation_memory_bytes(spec, batch, prompt_len, a))
    result["memory_bytes"], result["fits"] = need, need <= hw.memory_bytes
    result["shortfall_bytes"] = max(0, need - hw.memory_bytes)


def _from_answer(result: dict[str, Any], spec: Any, hardware: str, prompt_len: int, gen_len: int, batch: int,
                 w_dt: str, kv_dt: str, tp: int) -> None:
    """Times (per device, all-reduces included) and memory against the device, from core.whatif.answer."""
    from core import deployment, whatif
    from core.hardware import load_hardware

    scenario = deployment.Scenario(batch=batch, prompt_len=prompt_len, gen_len=gen_len, weight_dtype=w_dt,
                                   kv_dtype=kv_dt, tp=tp)
    ans = whatif.answer(spec, load_hardware(hardware), scenario)
    _times(result, ans.ttft_s, ans.decode_s, ans.tpot_s)
    m = ans.memory
    result["memory_bytes"], result["fits"], result["shortfall_bytes"] = m.total, m.fits, m.shortfall
    if tp > 1:
        result["allreduce_s_per_decode_step"] = ans.decode_step.terms_s["allreduce"]
