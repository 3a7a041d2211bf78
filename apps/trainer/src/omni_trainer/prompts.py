"""Where the local engine's prompts come from: the built-in task or RL parquet files."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from omni_rewards.api import GroundTruth, as_ground_truth
from omni_trainer.config import Config


@dataclass
class Prepared:
    """One prompt, processed: model inputs (batch dim 1) and its reward fields. ``index`` is
    the data's own row number (reported, never used to group samples)."""

    inputs: dict[str, Any]
    data_source: str
    ground_truth: GroundTruth
    index: int
    extra_info: dict[str, Any] | None = None


class PromptSource(Protocol):
    dropped: int  # rows left out at load

    def __len__(self) -> int: ...
    def __getitem__(self, item: int, /) -> Prepared: ...


class BuiltinPrompts:
    """The built-in task's rows, processed on first use (start-up stays short)."""

    def __init__(self, rows: Sequence[dict[str, Any]], encode: Callable[[dict[str, Any]], Prepared]) -> None:
        self.rows = rows
        self.encode = encode
        self.cache: dict[int, Prepared] = {}
        self.dropped = 0

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, item: int) -> Prepared:
        if item not in self.cache:
            self.cache[item] = self.encode(self.rows[item])
        return self.cache[item]


class DatasetPrompts:
    """RL parquet rows through omni-data's dataset, processed when a batch needs them.
    ``dropped`` counts the rows left out at load (bad rows with ``on_bad_row=skip``, and
    overlong prompts)."""

    def __init__(
        self,
        files: Sequence[str],
        processor: Any,
        config: Config,
        *,
        required_extra_info: tuple[str, ...] = (),
        require_ground_truth: bool = True,
    ) -> None:
        from omni_data import DatasetConfig, RLDataset

        data = config.data
        settings = DatasetConfig(
            max_prompt_length=data.max_prompt_length,
            on_bad_row=data.on_bad_row,  # type: ignore[arg-type]  # checked by load_config
            mm_processor_kwargs=dict(data.mm_processor_kwargs),
            use_audio_in_video=data.use_audio_in_video,
            soundtrack_as_audio=data.soundtrack_as_audio,
            required_extra_info=required_extra_info,
            require_ground_truth=require_ground_truth,
        )
        self.dataset = RLDataset(list(files), processor, settings)
        self.dropped = sum(self.dataset.report.dropped.values())
        print(self.dataset.report.format())

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item: int) -> Prepared:
        row = self.dataset[item]
        inputs = {"input_ids": row["input_ids"][None], "attention_mask": row["attention_mask"][None],
                  **row["multi_modal_inputs"]}
        truth = as_ground_truth(row["reward_model"]["ground_truth"])
        return Prepared(inputs, row["data_source"], truth, int(row["index"]), row["extra_info"])


class SpokenPrompts:
    """A speech stage's prompts: each row's prompt, then the assistant turn holding the text
    the stage speaks, ``text_of(prompt)`` (the row's ``extra_info['spoken_text']``, or the
    thinker's answer); each row's text is found once and kept."""

    def __init__(self, source: PromptSource, tokenizer: Any, text_of: Callable[[Prepared], str]) -> None:
        self.source = source
        self.tokenizer = tokenizer
        self.text_of = text_of
        self.texts: dict[int, str] = {}
        self.dropped = source.dropped

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, item: int) -> Prepared:
        prepared = self.source[item]
        if item not in self.texts:
            self.texts[item] = self.text_of(prepared)
        return with_spoken_text(prepared, self.texts[item], self.tokenizer)


def with_spoken_text(prepared: Prepared, text: str, tokenizer: Any) -> Prepared:
    """``prepared``'s prompt (ending with the assistant turn's start) followed by ``text``,
    without an end of turn: the sequence a speech stage speaks the end of."""
    import torch

    ids = torch.cat([prepared.inputs["input_ids"], torch.tensor([tokenizer.encode(text)])], dim=1)
    inputs = {**prepared.inputs, "input_ids": ids, "attention_mask": torch.ones_like(ids)}
    extra_info = {**(prepared.extra_info or {}), "spoken_text": text}
    return Prepared(inputs, prepared.data_source, prepared.ground_truth, prepared.index, extra_info)


def encode_builtin(processor: Any, row: dict[str, Any], max_prompt_length: int) -> Prepared:
    """A built-in task row through the processor's chat template.

    Raises:
        ValueError: the prompt is longer than ``data.max_prompt_length``.
    """
    text = processor.apply_chat_template(row["messages"], add_generation_prompt=True, tokenize=False)
    media: dict[str, Any] = {}
    if row.get("images"):
        media["images"] = row["images"]
    if row.get("audios"):
        media["audio"] = row["audios"]
    inputs = dict(processor(text=[text], return_tensors="pt", **media))
    if inputs["input_ids"].shape[1] > max_prompt_length:
        raise ValueError(
            f"Built-in prompt {row['index']} has {inputs['input_ids'].shape[1]} tokens, over "
            f"data.max_prompt_length={max_prompt_length}."
        )
    return Prepared(inputs, row["data_source"], row["ground_truth"], row["index"])
