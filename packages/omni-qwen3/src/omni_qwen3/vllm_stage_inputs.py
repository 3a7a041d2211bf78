"""The talker's prompt placeholders in omni_qwen3's own pipelines, for any checkpoint's token ids.

vLLM-Omni 0.28 sizes the talker's prompt in the orchestrator
(``stage_input_processors/qwen3_omni.py``, ``_compute_talker_prompt_ids_length``) with the
released tokenizer's ids written into the function: ``<|im_start|>`` 151644, ``system`` 8948,
``user`` 872, ``assistant`` 77091. The talker itself reads the same ids from the checkpoint's
config (``qwen3_omni.py``, ``_thinker_to_talker_prefill``). A checkpoint with other ids (the
tiny test model, a re-tokenised fine-tune) gets a placeholder of 0 ids from the orchestrator,
and the talker cannot be prefilled.

:func:`thinker2talker_token_only` is the talker's ``sync_process_input_func`` in the pipelines
``omni_qwen3.vllm_pipeline`` registers. It runs upstream's function, then sizes each
placeholder with upstream's own length rule applied to the prompt's ids mapped onto the
released ids. The checkpoint's ids ride on each engine prompt
(``additional_information[ROLE_IDS_KEY]``, :func:`role_token_ids`); without them the released
ids are assumed and the result is upstream's, unchanged.

vLLM-Omni is imported inside the function (it is only present with the gpu or cpu-rollout extra).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

ROLE_IDS_KEY = "qwen3_omni_role_token_ids"
"""The ``additional_information`` key of an engine prompt that carries the checkpoint's ids."""

RELEASED_ROLE_IDS: Mapping[str, int] = {"im_start": 151644, "system": 8948, "user": 872, "assistant": 77091}
"""The ids upstream's length rule is written for (Qwen3-Omni's released tokenizer)."""

_CONFIG_NAMES = {"im_start": "im_start_token_id", "system": "system_token_id",
                 "user": "user_token_id", "assistant": "assistant_token_id"}
_UNUSED_ID = -1


def role_token_ids(config: Any) -> dict[str, int]:
    """The checkpoint's role ids (``config``: its ``Qwen3OmniMoeConfig``), as the talker reads them."""
    return {role: int(getattr(config, name)) for role, name in _CONFIG_NAMES.items()}


def as_released_ids(token_ids: Sequence[int], role_ids: Mapping[str, int]) -> list[int]:
    """``token_ids`` with each role id replaced by the released one, and any other token that
    happens to equal a released role id replaced by -1 (so the rule sees only real roles)."""
    to_released = {int(role_ids[role]): released for role, released in RELEASED_ROLE_IDS.items()}
    released = set(RELEASED_ROLE_IDS.values())
    return [to_released.get(int(t), _UNUSED_ID if int(t) in released else int(t)) for t in token_ids]


def _role_ids(prompt: Any, index: int) -> Mapping[str, int] | None:
    one = prompt[index] if isinstance(prompt, list) and index < len(prompt) else prompt
    info = one.get("additional_information") if isinstance(one, Mapping) else None
    ids = info.get(ROLE_IDS_KEY) if isinstance(info, Mapping) else None
    return ids if isinstance(ids, Mapping) else None


def thinker2talker_token_only(
    source_outputs: list[Any],
    prompt: Any = None,
    requires_multimodal_data: bool = False,
    streaming_context: Any | None = None,
) -> list[Any]:
    """Upstream's talker placeholders, each as long as the talker's prefill for this checkpoint.

    Raises:
        NotImplementedError: a streaming session (its incremental ids are upstream's alone;
            omni_qwen3's pipelines never stream).
    """
    from vllm_omni.model_executor.stage_input_processors import qwen3_omni as upstream

    if bool(getattr(streaming_context, "enabled", False)):
        raise NotImplementedError("omni_qwen3's talker pipelines do not support streaming sessions.")
    placeholders: list[Any] = upstream.thinker2talker_token_only(
        source_outputs, prompt, requires_multimodal_data, streaming_context
    )
    for index, (thinker, placeholder) in enumerate(zip(source_outputs, placeholders, strict=True)):
        role_ids = _role_ids(prompt, index)
        if role_ids is None:
            continue
        prompt_ids = as_released_ids(upstream._ensure_list(thinker.prompt_token_ids), role_ids)
        output_ids = upstream._ensure_list(thinker.outputs[0].cumulative_token_ids)
        info = {"ids": {"all": prompt_ids + list(output_ids), "prompt": prompt_ids}}
        placeholder["prompt_token_ids"] = [0] * upstream._compute_talker_prompt_ids_length(info, device="cpu")
    return placeholders
