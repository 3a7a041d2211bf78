"""Offline preference optimisation inside verl's actor workers: the batch they read and the loss
they train with.

The driver (``omni_trainer.engines.verl.preference``, in the launching process) builds each
update's batch with :func:`answer_batch` and :func:`to_actor_format` and installs
:func:`preference_loss` through the worker's public ``set_loss_fn``. Ray pickles that loss by
reference, so verl's worker processes import this module: it lives here, with verl's other
extensions, and not in the app.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from omni_training.preference import PREFERENCE_LOSSES, PreferenceSettings, preference_metrics, sequence_log_probs

if TYPE_CHECKING:
    from tensordict import TensorDict  # type: ignore[import-untyped]

REFERENCE_KEY = "reference_sequence_log_probs"
"""Per row of an update batch: its answer's cached reference sequence log-prob."""
METRIC_PREFIX = "preference/"
"""What the loss function's metrics are sent under (verl adds its own ``loss`` and ``grad_norm``)."""


def position_ids(processor: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, media: dict[str, Any]) -> torch.Tensor:
    """One row's position ids, as verl's agent loop computes them for the actor.

    With an mrope processor the shape is ``[1, 4, L]``: text positions, then the three mrope
    rows. Otherwise it is ``[1, L]``. ``media`` loses ``mm_token_type_ids``, which verl
    rebuilds per token.
    """
    if not hasattr(processor, "get_rope_index"):
        return (attention_mask.cumsum(-1) - 1).clamp(min=0) * attention_mask
    kwargs: dict[str, Any] = {"image_grid_thw": media.get("image_grid_thw"), "video_grid_thw": media.get("video_grid_thw")}
    if media.pop("mm_token_type_ids", None) is not None:
        from verl.utils.tokenizer import get_processor_token_id

        types = torch.zeros_like(input_ids)
        for kind, value in (("image", 1), ("video", 2)):
            token = get_processor_token_id(processor, kind)
            if token is not None:
                types[0][input_ids[0] == token] = value
        kwargs["mm_token_type_ids"] = types
    rope_kwargs = getattr(processor, "get_rope_index_kwargs", None)
    if rope_kwargs is not None:
        kwargs.update(rope_kwargs(media))
    mrope, _ = processor.get_rope_index(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    valid = attention_mask[0].bool()
    text = torch.ones((1, 1, input_ids.shape[1]), dtype=torch.long)
    text[0, 0, valid] = torch.arange(int(valid.sum()))
    return torch.cat((text, mrope.transpose(0, 1)), dim=1)


def answer_batch(rows: Sequence[tuple[Mapping[str, Any], Sequence[int]]], processor: Any, pad_token_id: int) -> TensorDict:
    """Each row's prompt (its processed ``inputs``, batch dimension 1) and answer token ids as
    verl's padded RL batch: ``prompts`` left-padded, ``responses`` right-padded, ``input_ids``,
    ``attention_mask``, ``response_mask``, ``position_ids`` and ``multi_modal_inputs``, as
    verl's agent loop hands them to the actor (checked against it in
    ``apps/trainer/tests/engines/verl/verl_cpu_harness.py``). An offline preference run puts
    each pair's chosen then rejected answer on adjacent rows."""
    from verl import DataProto

    prompt_width = max(int(inputs["attention_mask"].sum()) for inputs, _ in rows)
    answer_width = max(len(answer) for _, answer in rows)
    columns: dict[str, list[torch.Tensor]] = {k: [] for k in ("prompts", "responses", "response_mask", "input_ids",
                                                              "attention_mask", "position_ids")}
    media_rows = []
    for inputs, answer in rows:
        prompt = inputs["input_ids"][0][inputs["attention_mask"][0].bool()]
        left = torch.full((prompt_width - len(prompt),), pad_token_id, dtype=torch.long)
        right = torch.full((answer_width - len(answer),), pad_token_id, dtype=torch.long)
        prompt_ids = torch.cat([left, prompt])
        response = torch.cat([torch.tensor(list(answer), dtype=torch.long), right])
        response_mask = (torch.arange(answer_width) < len(answer)).long()
        attention = torch.cat([(torch.arange(prompt_width) >= len(left)).long(), response_mask])
        input_ids = torch.cat([prompt_ids, response])
        media = {k: v for k, v in inputs.items() if k not in ("input_ids", "attention_mask")}
        positions = position_ids(processor, input_ids[None], attention[None], dict(media))
        for key, value in (("prompts", prompt_ids), ("responses", response), ("response_mask", response_mask),
                           ("input_ids", input_ids), ("attention_mask", attention), ("position_ids", positions[0])):
            columns[key].append(value)
        media.pop("mm_token_type_ids", None)
        grid = media.get("image_grid_thw")
        if grid is not None:  # verl's agent loop adds each image's patch count (its FLOPs counter reads it)
            media["images_seqlens"] = torch.repeat_interleave(grid[:, 1] * grid[:, 2], grid[:, 0])
        media_rows.append(media)
    from tensordict import TensorDict

    batch = TensorDict({k: torch.stack(v) for k, v in columns.items()}, batch_size=len(rows))
    non_tensor = {"multi_modal_inputs": np.array(media_rows, dtype=object)}  # verl's agent loop: {} for text rows
    return DataProto(batch=batch, non_tensor_batch=non_tensor).to_tensordict()


def to_actor_format(batch: TensorDict, **meta: Any) -> TensorDict:
    """verl's no-padding form of ``batch`` (what its actor workers compute on), with ``meta``
    as non-tensor settings and the tokens per row verl's throughput metrics read."""
    from tensordict.tensorclass import NonTensorData  # type: ignore[import-untyped]
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    tokens = batch["attention_mask"].sum(-1).tolist()
    batch = left_right_2_no_padding(batch)
    tu.assign_non_tensor(batch, global_token_num=NonTensorData(tokens), **meta)
    return batch


# --- the loss, inside verl's actor workers ----------------------------------------------------


def row_sequence_log_probs(model_output: dict[str, Any], data: TensorDict, average: bool) -> torch.Tensor:
    """Each row's answer log-prob (summed, or averaged over its tokens) from the actor's
    no-padding token log-probs."""
    from verl.workers.utils.padding import no_padding_2_padding

    token_log_probs = no_padding_2_padding(model_output["log_probs"], data)
    mask = data.select("response_mask").to_padded_tensor()["response_mask"].to(token_log_probs.dtype)
    return sequence_log_probs(token_log_probs, mask, average=average)


def preference_loss(
    settings: PreferenceSettings, model_output: dict[str, Any], data: TensorDict, dp_group: Any = None
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The preference loss of one micro-batch, as verl's ``ppo_loss`` scales a loss: its pairs'
    share of the mini-batch mean, times the data-parallel size (FSDP averages gradients over
    ranks). Metrics: the micro-batch's means, under ``preference/`` and TRL's names."""
    from verl.utils.metric import AggregationType, Metric

    sequence = row_sequence_log_probs(model_output, data, settings.average_log_prob)
    chosen, rejected = sequence[0::2], sequence[1::2]
    if REFERENCE_KEY in data.keys():
        reference = data[REFERENCE_KEY].to(sequence)
        ref_chosen, ref_rejected = reference[0::2], reference[1::2]
    else:
        ref_chosen = ref_rejected = None
    out = PREFERENCE_LOSSES.get(settings.loss_type)(chosen, rejected, ref_chosen, ref_rejected, settings)
    pairs_in_mini_batch = int(data["global_batch_size"]) // 2
    loss = out.losses.sum() / pairs_in_mini_batch * int(data["dp_size"])
    means = preference_metrics(out, chosen, rejected)
    metrics = {f"{METRIC_PREFIX}{k}": Metric(AggregationType.MEAN, v) for k, v in means.items()}
    return loss, metrics
