"""One parsed row → prompt token ids and multimodal tensors, through the model's processor.

The processor is whatever the model adapter's ``configure_processor`` returned (for
Qwen3-Omni, transformers' ``Qwen3OmniMoeProcessor``): it must offer ``apply_chat_template``
and be callable with ``text``, ``images``, ``audio`` and ``videos``, as transformers'
multimodal processors are. Its chat template receives content parts ``{"type": "image" |
"audio" | "video"}`` where the media go.

With ``use_audio_in_video`` each video's soundtrack goes to the processor as an audio item,
in the prompt's order of media (a video's track where the video is), which is the order the
processor interleaves them in; the prompt's ``multi_modal_inputs`` then carry
``use_audio_in_video=True``, which the thinker's forward and ``get_rope_index`` read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from omni_data.errors import RowError
from omni_data.media import MediaSettings, decode_all
from omni_data.rows import ParsedRow

if TYPE_CHECKING:
    import torch


AUDIO_IN_VIDEO = "use_audio_in_video"
"""The processor's, the thinker forward's and ``get_rope_index``'s name of the switch."""


@dataclass(frozen=True)
class EncodedPrompt:
    input_ids: torch.Tensor  # [T] int64
    attention_mask: torch.Tensor  # [T] int64
    multi_modal_inputs: dict[str, Any]
    """pixel_values, image_grid_thw, input_features, ... (tensors), and ``use_audio_in_video``
    (``True``) for a prompt whose videos' soundtracks are interleaved."""

    soundtrack_tokens: int = 0
    """Audio tokens laid out among the videos' frames (``use_audio_in_video``): the soundtracks
    the thinker hears."""

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
    use_audio_in_video: bool = False,
) -> EncodedPrompt:
    """Decode the row's media and run the processor on the templated prompt;
    ``use_audio_in_video``: with each video's soundtrack interleaved.

    Raises:
        MediaError: a medium cannot be read (names the row and the file), or a video has no
            soundtrack to interleave (reason ``no_soundtrack``).
        RowError: the processor rejects the row (reason ``processor_error``), or the row has
            a medium the processor has no sub-processor for (reason ``unsupported_media``: a
            text-only model's tokenizer would drop it without a word).
    """
    _refuse_media_without_processor(processor, parsed, where)
    media = decode_all(parsed.media, settings, where=where, use_audio_in_video=use_audio_in_video)
    images, audios = media.images, media.audios
    videos = [frames for frames, _ in media.videos or ()]
    metadata = [meta for _, meta in media.videos or ()]
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
        extra = {k: v for k, v in (mm_processor_kwargs or {}).items() if k != AUDIO_IN_VIDEO}  # ours decides it
        kwargs: dict[str, Any] = {"text": [text], "return_tensors": "pt", **extra}
        interleaved = use_audio_in_video and bool(videos)
        if interleaved:
            kwargs[AUDIO_IN_VIDEO] = True
        if images:
            kwargs["images"] = images
        if audios:
            kwargs["audio"] = audios
        if videos:
            kwargs.update(videos=videos, video_metadata=metadata, do_sample_frames=False)
        output = processor(**kwargs)
    except Exception as exc:
        raise RowError(f"{where}: the processor rejected the row: {exc}", reason="processor_error") from exc
    prompt = _to_prompt(output)
    if not interleaved:
        return prompt
    prompt.multi_modal_inputs[AUDIO_IN_VIDEO] = True
    return replace(prompt, soundtrack_tokens=soundtrack_tokens(processor, prompt.input_ids))


def soundtrack_tokens(processor: Any, input_ids: torch.Tensor) -> int:
    """The audio tokens of ``input_ids`` that sit in a video's run of frame and audio tokens."""
    tokenizer = processor.tokenizer
    video, audio = (tokenizer.convert_tokens_to_ids(token) for token in (processor.video_token, processor.audio_token))
    count, run_audio, run_has_video = 0, 0, False
    for token in [*input_ids.tolist(), None]:
        if token in (video, audio):
            run_audio += token == audio
            run_has_video |= token == video
            continue
        count += run_audio if run_has_video else 0
        run_audio, run_has_video = 0, False
    return count


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
