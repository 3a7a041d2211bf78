"""A teacher server's answer to verl's distillation request, from vLLM's prompt log-probs.

verl's ``AsyncTeacherLLMServerManager`` sends the student's prompt + sampled response as
one prompt (same media) with ``max_tokens=1`` and ``prompt_logprobs=k``, and reads two
entries of the returned ``TokenOutput.extra_fields``, each ``[S][max(k, 1)]`` with ``S``
the sequence length:

- ``prompt_ids``: row ``i`` is about the token at position ``i + 1``: for ``k == 0`` that
  token itself, for ``k > 0`` the teacher's top-k token ids there, by rank;
- ``prompt_logprobs``: the matching teacher log-probs.

vLLM has no log-prob for the first token, so the rows are shifted by one and a zero row
pads the end: the layout verl's own vLLM server returns and its actor aligns with the
response. Light: no vLLM import (the entries only need ``.logprob`` and ``.rank``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

TeacherFields = dict[str, list[list[int]] | list[list[float]]]


class TeacherOutputError(RuntimeError):
    """The engine's prompt log-probs cannot be aligned with the request's sequence."""


def teacher_fields(
    prompt_token_ids: Sequence[int] | None,
    prompt_logprobs: Sequence[Mapping[int, Any] | None] | None,
    *,
    num_logprobs: int,
    sequence_ids: Sequence[int],
) -> TeacherFields:
    """``prompt_ids`` and ``prompt_logprobs`` for verl from one request's engine output.

    Args:
        prompt_token_ids: the prompt as the engine ran it (media placeholders expanded).
        prompt_logprobs: per prompt position ``None`` (the first) or a mapping token id ->
            object with ``.logprob`` and ``.rank`` (vLLM's ``Logprob``).
        num_logprobs: the request's ``prompt_logprobs`` (0: the sequence's own tokens).
        sequence_ids: the sequence verl sent; the engine must have scored exactly it.

    Raises:
        TeacherOutputError: no prompt log-probs, a different sequence (e.g. media expanded
            to another number of placeholder tokens), or a position lacking a wanted entry.
    """
    if prompt_logprobs is None or prompt_token_ids is None:
        raise TeacherOutputError(
            "The teacher engine returned no prompt log-probs; the request must set prompt_logprobs "
            "and the policy stage must keep a logprobs processor (tokenizer initialised)."
        )
    engine_ids = [int(token) for token in prompt_token_ids]
    if engine_ids != [int(token) for token in sequence_ids]:
        raise TeacherOutputError(
            f"The teacher scored {len(engine_ids)} prompt tokens for a sequence of {len(sequence_ids)} "
            f"(first difference at position {_first_difference(engine_ids, sequence_ids)}); the engine "
            "expanded the media placeholders differently from the student's processor."
        )
    if len(prompt_logprobs) != len(engine_ids):
        raise TeacherOutputError(
            f"The teacher returned {len(prompt_logprobs)} prompt log-prob entries for {len(engine_ids)} tokens."
        )
    width = max(num_logprobs, 1)
    ids: list[list[int]] = []
    logprobs: list[list[float]] = []
    for position in range(1, len(engine_ids)):
        entry = prompt_logprobs[position] or {}
        if num_logprobs == 0:
            token = engine_ids[position]
            if token not in entry:
                raise TeacherOutputError(f"Position {position}: no teacher log-prob for the sequence's token {token}.")
            ids.append([token])
            logprobs.append([_logprob(entry[token])])
        else:
            by_rank = {int(getattr(value, "rank", 0)): (int(token), _logprob(value)) for token, value in entry.items()}
            missing = [rank for rank in range(1, num_logprobs + 1) if rank not in by_rank]
            if missing:
                raise TeacherOutputError(
                    f"Position {position}: the teacher's top-{num_logprobs} lacks ranks {missing[:5]} "
                    "(is the engine's max_logprobs below distillation_loss.topk?)."
                )
            ids.append([by_rank[rank][0] for rank in range(1, num_logprobs + 1)])
            logprobs.append([by_rank[rank][1] for rank in range(1, num_logprobs + 1)])
    ids.append([0] * width)
    logprobs.append([0.0] * width)
    return {"prompt_ids": ids, "prompt_logprobs": logprobs}


def _logprob(value: Any) -> float:
    return float(getattr(value, "logprob", value))


def _first_difference(left: Sequence[int], right: Sequence[int]) -> int:
    for position, (a, b) in enumerate(zip(left, right)):
        if int(a) != int(b):
            return position
    return min(len(left), len(right))
