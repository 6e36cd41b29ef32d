"""Storage sizes of the dtypes the cost model prices, and the names the code base uses for them.

Sizes are kept in bits so int4 (half a byte) stays exact in integer arithmetic: byte counts are
computed as ceil(elements * bits / 8) once, at the end, instead of accumulating float halves.
"""

from __future__ import annotations

DTYPE_BITS: dict[str, int] = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}
DTYPES: tuple[str, ...] = tuple(DTYPE_BITS)

# Quantised weight formats are matmul-input formats only: the activations and the KV cache around
# them stay in a 16-bit float unless the caller says otherwise (what int8/int4/fp8 kernels do).
QUANTIZED: frozenset[str] = frozenset({"fp8", "int8", "int4"})

# torch names and the runner's "float32" spelling map onto the short keys.
_ALIASES: dict[str, str] = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "torch.float32": "fp32",
    "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16",
    "fp8": "fp8", "float8": "fp8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
    "torch.float8_e4m3fn": "fp8", "torch.float8_e5m2": "fp8",
    "int8": "int8", "torch.int8": "int8",
    "int4": "int4", "q4": "int4",
}


def normalize_dtype(name: object) -> str:
    """The short key ("fp32", "bf16", ...) for a dtype name or torch dtype; ValueError if unknown."""
    key = _ALIASES.get(str(name).strip().lower())
    if key is None:
        raise ValueError(f"unknown dtype {name!r}: expected one of {', '.join(DTYPES)}")
    return key


def dtype_bits(name: object) -> int:
    return DTYPE_BITS[normalize_dtype(name)]


def dtype_bytes(name: object) -> float:
    """Bytes per element (0.5 for int4)."""
    return dtype_bits(name) / 8


def default_companion_dtype(weight_dtype: object) -> str:
    """Activation / KV dtype to assume when only the weight dtype is given."""
    key = normalize_dtype(weight_dtype)
    return "bf16" if key in QUANTIZED else key


def nbytes(elements: int, dtype: object) -> int:
    """Bytes taken by `elements` values of `dtype`, rounded up to whole bytes."""
    return -(-int(elements) * dtype_bits(dtype) // 8)
