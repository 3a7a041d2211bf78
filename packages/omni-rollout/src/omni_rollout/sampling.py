"""Sampling settings (verl's ``actor_rollout_ref.rollout.*`` names)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingSettings:
    """How responses are sampled.

    ``temperature == 0`` means greedy decoding. ``top_k = -1`` and ``top_p = 1`` disable
    those filters. Log-probs returned by the engines are under the distribution actually
    sampled from (after temperature, top-k and top-p).
    """

    n: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 64
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.n < 1:
            problems.append(f"n must be >= 1, got {self.n}")
        if self.temperature < 0:
            problems.append(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            problems.append(f"top_k must be -1 (off) or >= 1, got {self.top_k}")
        if self.max_new_tokens < 1:
            problems.append(f"max_new_tokens (response_length) must be >= 1, got {self.max_new_tokens}")
        if problems:
            raise ValueError("Invalid sampling settings: " + "; ".join(problems) + ".")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0
