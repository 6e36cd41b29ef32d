"""What arrives at the simulated server: requests with an arrival time and their token counts."""

from __future__ import annotations

import math
from dataclasses import dataclass


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
