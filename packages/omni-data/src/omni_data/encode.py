"""One parsed row → prompt token ids and multimodal tensors, through the model's processor.

The processor is whatever the model adapter's ``configure_processor`` returned (for
Qwen3-Omni, transformers' ``Qwen3OmniMoeProcessor``): it must offer ``apply_chat_template``
and be callable with ``text``, ``images``, ``audio`` and ``videos``, as transformers'
multimodal processors are. Its chat template receives content parts ``{"type": "image" |
"audio" | "video"}`` where the media go.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omni_data.errors import RowError
from omni_data.media import MediaSettings, decode
from omni_data.rows import ParsedRow

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class EncodedPrompt:
    input_ids: torch.Tensor  # [T] int64
    attention_mask: torch.Tensor  # [T] int64
    multi_modal_inputs: dict[str, torch.Tensor]  # pixel_values, image_grid_thw, input_features, ...

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


def template_messages(parsed: ParsedRow) -> list[dict[str, Any]]:
    """Messages for ``apply_chat_template``: media parts carry only their type."""
    return [
        {
            "role": m["role"],
            "content": m["content"]
            if isinstance(m["content"], str)
            else [p if p["type"] == "text" else {"type": p["type"]} for p in m["content"]],
        }
        for m in parsed.messages
    ]


def encode_row(
    processor: Any,
    parsed: ParsedRow,
    settings: MediaSettings,
    *,
    where: str,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    mm_processor_kwargs: Mapping[str, Any] | None = None,
) -> EncodedPrompt:
    """Decode the row's media and run the processor on the templated prompt.

    Raises:
        MediaError: a medium cannot be read (names the row and the file).
        RowError: the processor rejects the row (reason ``processor_error``), or the row has
            a medium the processor has no sub-processor for (reason ``unsupported_media``: a
            text-only model's tokenizer would drop it without a word).
    """
    _refuse_media_without_processor(processor, parsed, where)
    images: list[Any] = []
    audios: list[Any] = []
    videos: list[Any] = []
    metadata: list[Any] = []
    for ref in parsed.media:
        value = decode(ref, settings, where=where)
        if ref.kind == "image":
            images.append(value)
        elif ref.kind == "audio":
            audios.append(value)
        else:
            videos.append(value[0])
            metadata.append(value[1])
    try:
        text = processor.apply_chat_template(
            template_messages(parsed),
            add_generation_prompt=True,
            tokenize=False,
            **dict(chat_template_kwargs or {}),
        )
        tokenizer = getattr(processor, "tokenizer", None)
        if not parsed.media and tokenizer is not None:
            # Text only: the processor would only forward to its tokenizer, after validating
            # every modality's kwargs (about half the time of a short text row).
            output = tokenizer([text], return_tensors="pt")
            return _to_prompt(output)
        kwargs: dict[str, Any] = {"text": [text], "return_tensors": "pt", **dict(mm_processor_kwargs or {})}
        if images:
            kwargs["images"] = images
        if audios:
            kwargs["audio"] = audios
        if videos:
            kwargs.update(videos=videos, video_metadata=metadata, do_sample_frames=False)
        output = processor(**kwargs)
    except Exception as exc:
        raise RowError(f"{where}: the processor rejected the row: {exc}", reason="processor_error") from exc
    return _to_prompt(output)


MEDIA_PROCESSORS = {"image": "image_processor", "audio": "feature_extractor", "video": "video_processor"}
"""The attribute of a transformers processor that handles each medium."""


def _refuse_media_without_processor(processor: Any, parsed: ParsedRow, where: str) -> None:
    kinds = sorted({ref.kind for ref in parsed.media if getattr(processor, MEDIA_PROCESSORS[ref.kind], None) is None})
    if kinds:
        raise RowError(
            f"{where}: the row has {' and '.join(kinds)} input, which the model's processor "
            f"({type(processor).__name__}) cannot take (it has no "
            f"{' or '.join(MEDIA_PROCESSORS[kind] for kind in kinds)}): a text-only model reads text rows only. "
            "Train a model that takes this medium, or drop these rows",
            reason="unsupported_media",
        )


def _to_prompt(output: Mapping[str, Any]) -> EncodedPrompt:
    tensors = {k: v for k, v in output.items() if hasattr(v, "shape")}
    input_ids = tensors.pop("input_ids")[0].long()
    mask = tensors.pop("attention_mask", None)
    attention_mask = mask[0].long() if mask is not None else input_ids.new_ones(input_ids.shape)
    return EncodedPrompt(input_ids=input_ids, attention_mask=attention_mask, multi_modal_inputs=tensors)
