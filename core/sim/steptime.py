"""The time of one simulated iteration, as a handful of coefficients taken from the one cost function.

A simulation prices tens of thousands of iterations, each of up to hundreds of rows; calling
core.deployment.step_time_s (the cost function plus the predictor) for each would take about 20 µs a
call plus a Python loop over the rows. But that time is linear in a few sums over the rows:

    time = base + per_row * rows + per_token * tokens + per_embedding_row * min(tokens, vocab)
           + per_held * held + per_pair * pairs + multi_token * [any row feeds > 1 token]
           (+ per_position * distinct positions, for models with a learned position table)
           (+ per_expert * E(1 - (1 - k/E)^tokens), a mixture of experts' expected experts read)
           (+ per_latent_pair * latent pairs + per_expanded * expanded positions
              + per_absorbed * absorbed tokens, for latent attention run as engines run it)

where `held` is the cached positions the rows read (summed over layers) and `pairs` the (query,
key) pairs of attention. Latent attention splits the rows by the form each takes (core.cost.absorbs):
an absorbed row's pairs score against the latent, an expanded row re-expands every position it attends. `StepTime.fit` reads the coefficients off step_time_s at a dozen
designed row sets and refuses to return unless they reproduce it exactly at every one of them,
so the simulator keeps one cost model: this is its derivative, not a second copy of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.cost import RowShape, RowSums, _position_rows, held_positions, latent_costs, row_sums
from core.hardware import HardwareSpec
from core.predictor import curve_at
from core.spec import ModelSpec

FEATURES = ("base", "per_row", "per_token", "per_embedding_row", "per_held", "per_pair", "multi_token",
            "per_position", "per_expert", "per_latent_pair", "per_expanded", "per_absorbed",
            "per_curve_token", "per_curve_row")


@dataclass(frozen=True)
class StepTime:
    """Seconds of one iteration from its row sums. Build it with `fit` (from the cost model) or, in a
    hand-worked test, directly with round numbers."""

    base: float = 0.0
    per_row: float = 0.0
    per_token: float = 0.0
    per_embedding_row: float = 0.0
    per_held: float = 0.0
    per_pair: float = 0.0
    multi_token: float = 0.0
    per_position: float = 0.0
    per_expert: float = 0.0
    per_latent_pair: float = 0.0
    per_expanded: float = 0.0
    per_absorbed: float = 0.0
    # A calibrated CPU prices a matmul's arithmetic by how many rows pass through it: piecewise linear
    # in the tokens (the layers' matrices) and in the rows (the LM head), core.predictor.matmul_curve.
    per_curve_token: float = 0.0
    per_curve_row: float = 0.0
    token_curve: tuple[tuple[int, float], ...] = ()
    row_curve: tuple[tuple[int, float], ...] = ()
    vocab: int = 1 << 62
    n_layers: int = 1
    learned_positions: int = 0  # max positions of a learned table; 0 when the model has none
    sliding: tuple[int, int, int] | None = None  # (full layers, window layers, window) when windowed
    experts: tuple[int, int] | None = None  # (experts, experts per token) of a mixture of experts
    latent: tuple[int, int] | None = None  # core.cost.latent_costs, when rows choose a latent-attention form

    def experts_read(self, tokens: int) -> float:
        """Expected distinct experts an MoE layer reads for `tokens` tokens (ModelSpec.experts_read)."""
        if self.experts is None or tokens <= 0:
            return 0.0
        e, k = self.experts
        return e * (1.0 - (1.0 - k / e) ** tokens)

    @property
    def shape(self) -> RowShape:
        """What the row sums need of the model (core.cost.row_sums adds them up)."""
        return RowShape(self.n_layers, self.sliding, self.latent)

    def seconds(self, rows: int, tokens: int, held: int, pairs: int, multi: bool, positions: int = 0,
                latent: tuple[int, int, int] = (0, 0, 0)) -> float:
        """The iteration's time from its sums (see the module docstring); `latent` is (latent pairs,
        expanded positions, absorbed tokens), zero but for latent attention."""
        return (self.base + self.per_row * rows + self.per_token * tokens
                + self.per_embedding_row * min(tokens, self.vocab) + self.per_held * held
                + self.per_pair * pairs + (self.multi_token if multi else 0.0) + self.per_position * positions
                + (self.per_expert * self.experts_read(tokens) if self.experts else 0.0)
                + self.per_latent_pair * latent[0] + self.per_expanded * latent[1] + self.per_absorbed * latent[2]
                + (self.per_curve_token * curve_at(self.token_curve, tokens) if self.token_curve else 0.0)
                + (self.per_curve_row * curve_at(self.row_curve, rows) if self.row_curve else 0.0))

    def sums(self, rows: Sequence[tuple[int, int]]) -> tuple[int, int, int, bool, tuple[int, int, int]]:
        """(tokens, held, pairs, any multi-token row, latent sums) of (n_new, n_cached) rows: see `seconds`."""
        r = row_sums(self.shape, rows)
        return r.tokens, r.held, r.pairs, r.multi, self._latent(r)

    def _latent(self, r: RowSums) -> tuple[int, int, int]:
        """The latent sums count only for latent attention (elsewhere they would repeat held and tokens)."""
        return r.latent if self.latent is not None else (0, 0, 0)

    def seconds_of(self, r: RowSums, positions: int = 0) -> float:
        """The iteration's time from core.cost's row sums (what the event loop prices)."""
        return self.seconds(r.rows, r.tokens, r.held, r.pairs, r.multi, positions, self._latent(r))

    def of_rows(self, rows: Sequence[tuple[int, int]]) -> float:
        """The iteration's time from its (n_new, n_cached) rows: the sums, then `seconds`."""
        positions = (_position_rows([(n, c, 1) for n, c in rows], self.learned_positions)
                     if self.learned_positions else 0)
        return self.seconds_of(row_sums(self.shape, rows), positions)

    @classmethod
    def fit(cls, spec: ModelSpec, hardware: HardwareSpec, scenario, pred=None) -> StepTime:
        """Coefficients read off core.deployment.step_time_s for this model, machine and setting
        (scenario: a core.deployment.Scenario; its batch and lengths are ignored). `pred` replaces the
        machine's own predictor (a real engine's fit, core.engines.fit)."""
        from core.deployment import predictor, step_time_s

        pred = pred or predictor(spec, hardware, scenario)
        v = spec.vocab
        designs = [[(1, 0)], [(1, 0), (1, 0)], [(1, 100)], [(2, 0)], [(7, 0)], [(3, 50), (1, 10)], [(3, 0)],
                   [(5, 5), (5, 5), (1, 300)], [(1, 2000), (4, 0)], [(v + 10, 0)], [(v + 100, 3), (1, 7)],
                   [(1, 9000), (1, 40), (1, 3)], [(64, 4000)], [(300, 0), (1, 5000), (1, 1)],
                   [(400, 100)], [(256, 1000), (1, 20)], [(5, 3000), (1, 1)],
                   # every segment of a calibrated row curve (1, 4, 16, 64, 256 rows) met inside
                   [(16, 0)], [(32, 0)], [(128, 0)], *([(1, 30)] * n for n in (10, 40, 100))]
        template = cls(vocab=v, n_layers=spec.n_layers,
                       learned_positions=spec.max_positions if spec.learned_pos_emb else 0,
                       sliding=None if spec.sliding_window is None else
                       (spec.n_full_layers, spec.n_sliding_layers, spec.sliding_window),
                       experts=(spec.n_experts, spec.experts_per_token) if spec.is_moe else None,
                       latent=latent_costs(spec) if spec.is_mla else None,  # step_time_s runs rows as engines do
                       token_curve=pred.layer_curve, row_curve=pred.head_curve or pred.layer_curve
                       if pred.layer_curve else ())
        x, y = [], []
        for rows in designs:
            tokens, held, pairs, multi, latent = template.sums(rows)
            assert held == sum(held_positions(spec, c) for _, c in rows)
            positions = (_position_rows([(n, c, 1) for n, c in rows], spec.max_positions)
                         if spec.learned_pos_emb else 0)
            x.append([1.0, len(rows), tokens, min(tokens, v), held, pairs, float(multi),
                      positions, template.experts_read(tokens), *latent,
                      curve_at(template.token_curve, tokens) if template.token_curve else 0.0,
                      curve_at(template.row_curve, len(rows)) if template.row_curve else 0.0])
            y.append(step_time_s(spec, hardware, scenario, rows, pred))
        xa, ya = np.array(x, dtype=float), np.array(y, dtype=float)
        scale = np.abs(xa).max(axis=0)
        scale[scale == 0] = 1.0
        coef = np.linalg.lstsq(xa / scale, ya, rcond=None)[0] / scale
        fitted = cls(**{**template.__dict__, **dict(zip(FEATURES, (float(c) for c in coef), strict=True))})
        for rows, want in zip(designs, y, strict=True):
            got = fitted.of_rows(rows)
            if abs(got - want) > 1e-6 * want:
                raise ArithmeticError(f"step time is not linear in the row sums for {spec.name}: "
                                      f"{got} vs {want} s at {rows[:3]}")
        return fitted
