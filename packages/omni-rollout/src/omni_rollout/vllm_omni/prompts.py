"""Build the engine prompt for one request.

vLLM expands each multimodal placeholder token itself (``_apply_prompt_updates``). The HF
processor has already expanded them in the prompt ids the dataset produced, so sending
those ids unchanged would expand every image/audio twice. A processor that provides
``dedup_pad_tokens`` collapses each run of identical pad tokens back to one; it is
applied here before the ids leave for the engine.

The adapter may supply its own prompt (``prepare_engine_prompt``); it is validated with
``check_engine_prompt`` so ``mm_processor_kwargs`` can never be dropped silently.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from omni_contracts import RolloutAdapter, SchemaError, check_engine_prompt

DedupPadTokens = Callable[[Sequence[int]], Sequence[int]]


def dedup_function(processor: object | None) -> DedupPadTokens | None:
    """The processor's bound ``dedup_pad_tokens``, or ``None`` when it has none."""
    dedup = getattr(processor, "dedup_pad_tokens", None) if processor is not None else None
    return dedup if callable(dedup) else None


def build_engine_prompt(
    adapter: RolloutAdapter,
    prompt_ids: Sequence[int],
    multi_modal_data: Mapping[str, Any] | None = None,
    mm_processor_kwargs: Mapping[str, Any] | None = None,
    *,
    dedup_pad_tokens: DedupPadTokens | None = None,
    information: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The prompt dict handed to vLLM-Omni for one request.

    The default prompt is ``{"prompt_token_ids": [...]}`` plus ``multi_modal_data`` and
    ``mm_processor_kwargs`` when given (non-empty / non-None). ``information`` (the adapter's
    :meth:`~omni_contracts.RolloutAdapter.engine_prompt_information`) is added to the
    prompt's ``additional_information``, the adapter's custom prompt's too.

    Raises:
        SchemaError: the prompt is empty, or the adapter's custom prompt drops or changes
            ``mm_processor_kwargs`` or has no ``prompt_token_ids``/``prompt``.
    """
    ids = [int(token) for token in prompt_ids]
    if dedup_pad_tokens is not None:
        ids = [int(token) for token in dedup_pad_tokens(ids)]
    if not ids:
        raise SchemaError("Cannot build an engine prompt from empty prompt ids.")

    custom = adapter.prepare_engine_prompt(ids, multi_modal_data, mm_processor_kwargs)
    if custom is not None:
        if "prompt_token_ids" not in custom and "prompt" not in custom:
            raise SchemaError(
                f"{type(adapter).__name__}.prepare_engine_prompt returned a prompt with "
                f"neither 'prompt_token_ids' nor 'prompt' (keys: {sorted(custom)}); the "
                "engine needs one of them."
            )
        check_engine_prompt(custom, mm_processor_kwargs)
        return _with_information(dict(custom), information)

    prompt: dict[str, Any] = {"prompt_token_ids": ids}
    if multi_modal_data:
        prompt["multi_modal_data"] = dict(multi_modal_data)
    if mm_processor_kwargs is not None:
        prompt["mm_processor_kwargs"] = dict(mm_processor_kwargs)
    return _with_information(prompt, information)


def _with_information(prompt: dict[str, Any], information: Mapping[str, Any] | None) -> dict[str, Any]:
    if information:
        prompt["additional_information"] = {**prompt.get("additional_information", {}), **information}
    return prompt
