"""Check that an engine's prompt log-probs belong to exactly the prompt the caller sent.

A distillation teacher scores the student's prompt + response (``max_tokens=1``,
``prompt_logprobs=k``), and the caller (verl's ``extract_prompt_logprobs``) aligns row ``i``
with the token at position ``i + 1`` of *its* sequence, reading for ``k == 0`` the first
entry of each position (vLLM puts the scored token first) and for ``k > 0`` ranks ``1..k``.
That alignment is silent: if the engine expanded a media placeholder to a different number
of tokens, or returned fewer entries, the caller would pair log-probs with the wrong tokens.
:func:`check_prompt_logprobs` refuses such an output before it leaves the driver.
Light: no vLLM import (an entry only needs ``.rank``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class PromptLogprobsError(RuntimeError):
    """The engine's prompt log-probs cannot be aligned with the request's sequence."""


def check_prompt_logprobs(output: Any, sequence_ids: Sequence[int], num_logprobs: int) -> None:
    """Raise unless ``output`` scored exactly ``sequence_ids`` with the wanted entries.

    Args:
        output: the policy stage's final ``RequestOutput`` (``prompt_token_ids``,
            ``prompt_logprobs``: per position ``None`` for the first, else token id -> entry
            with ``.rank``).
        sequence_ids: the prompt ids the caller sent (before the driver's pad dedup).
        num_logprobs: the request's ``prompt_logprobs`` (0: the sequence's own tokens).

    Raises:
        PromptLogprobsError: no prompt log-probs, another sequence, a wrong number of
            entries, or a position lacking the sequence token (k = 0) or a rank in 1..k.
    """
    engine_ids = getattr(output, "prompt_token_ids", None)
    prompt_logprobs = getattr(output, "prompt_logprobs", None)
    if engine_ids is None or prompt_logprobs is None:
        raise PromptLogprobsError(
            "The engine returned no prompt log-probs; the request must set prompt_logprobs and "
            "the policy stage must keep a logprobs processor (tokenizer initialised)."
        )
    engine_ids = [int(token) for token in engine_ids]
    sequence = [int(token) for token in sequence_ids]
    if engine_ids != sequence:
        raise PromptLogprobsError(
            f"The engine scored {len(engine_ids)} prompt tokens for a sequence of {len(sequence)} "
            f"(first difference at position {_first_difference(engine_ids, sequence)}); it expanded "
            "the media placeholders differently from the caller's processor."
        )
    if len(prompt_logprobs) != len(engine_ids):
        raise PromptLogprobsError(
            f"The engine returned {len(prompt_logprobs)} prompt log-prob entries for "
            f"{len(engine_ids)} tokens."
        )
    for position in range(1, len(engine_ids)):
        entry = prompt_logprobs[position] or {}
        if num_logprobs == 0:
            first = next(iter(entry), None)
            if first is None or int(first) != engine_ids[position]:
                raise PromptLogprobsError(
                    f"Position {position}: the first prompt log-prob entry is for token {first}, "
                    f"not the sequence's token {engine_ids[position]}."
                )
            continue
        ranks = {int(getattr(value, "rank", 0)) for value in entry.values()}
        missing = [rank for rank in range(1, num_logprobs + 1) if rank not in ranks]
        if missing:
            raise PromptLogprobsError(
                f"Position {position}: the engine's top-{num_logprobs} lacks ranks {missing[:5]} "
                "(is the engine's max_logprobs below the requested prompt_logprobs?)."
            )


def _first_difference(left: Sequence[int], right: Sequence[int]) -> int:
    for position, (a, b) in enumerate(zip(left, right)):
        if a != b:
            return position
    return min(len(left), len(right))
