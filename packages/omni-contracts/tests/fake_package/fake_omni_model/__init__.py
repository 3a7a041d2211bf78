"""A fake omni model package, installed for the tests through a dist-info folder with an
``omni_rl.models`` entry point: a torch model shaped like a thinker/talker/vocoder model
and a training and rollout adapter pair that obeys the contract."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from omni_contracts import (
    ExtraFieldSpec,
    RolloutAdapter,
    StageConfig,
    StageOutput,
    TrainingAdapter,
)
from omni_model_kit.rollout_adapter import keep_final_outputs

FAKE_ARCH = "FakeOmniForConditionalGeneration"
FAKE_PIPELINE = "fake_omni"
CODEC_KEY = "fake_omni.codec_ids"


class FakeDecoderLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)


class FakeThinker(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 4)
        self.layers = nn.ModuleList([FakeDecoderLayer(), FakeDecoderLayer()])

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(input_ids)
        for layer in self.layers:
            hidden = layer.proj(hidden)
        return hidden


class FakeTalker(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.code_predictor = nn.Linear(4, 8)
        self.head = nn.Linear(4, 8)


class FakeOmniModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.thinker = FakeThinker()
        self.talker = FakeTalker()
        self.code2wav = nn.Conv1d(8, 1, 3)


class FakeTokenizer:
    chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


class FakeProcessor:
    def __init__(self) -> None:
        self.tokenizer = FakeTokenizer()

    @property
    def pad_token_ids(self) -> tuple[int, int, int]:
        return (90, 91, 92)

    def dedup_pad_tokens(self, prompt_ids: Any) -> Any:
        return prompt_ids

    def get_rope_index(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the fake model has no positions")

    def get_rope_index_kwargs(self, multi_modal_inputs: dict[str, Any]) -> dict[str, Any]:
        return {}


@TrainingAdapter.register(FAKE_ARCH, stage="thinker")
class FakeThinkerAdapter(TrainingAdapter):
    modalities = ("text", "image", "audio")
    extra_field_specs = {
        CODEC_KEY: ExtraFieldSpec(CODEC_KEY, ("response_length", 2), forward_arg="codec_ids"),
    }

    def get_strip_modules(self, model_config: Any) -> Sequence[str]:
        return ["talker", "talker.code_predictor", "code2wav"]

    def configure_processor(self, model_path: str, model_config: Any) -> Any:
        return FakeProcessor()

    def configure_tokenizer(self, model_path: str, model_config: Any) -> Any:
        return FakeTokenizer()

    def configure_model(self, module: Any, model_config: Any) -> None:
        super().configure_model(module, model_config)
        module._no_split_modules = ["FakeDecoderLayer"]


@RolloutAdapter.register(FAKE_PIPELINE)
class FakeRolloutAdapter(RolloutAdapter):
    modes = ("thinker_only", "thinker_talker")

    def build_stage_configs(self, mode: str) -> Sequence[StageConfig]:
        self.check_mode(mode)
        if mode == "thinker_only":
            return [StageConfig(0, "FakeThinker", "text", final_output=True)]
        return [
            StageConfig(0, "FakeThinker", "text", final_output=True, return_hidden_states=True),
            StageConfig(1, "FakeTalker", "codec", final_output=True, inputs=(0,)),
        ]

    def rollout_flags(self, mode: str) -> Mapping[int, Mapping[str, object]]:
        self.check_mode(mode)
        return {} if mode == "thinker_only" else {0: {"return_hidden_states": True}}

    def get_pipeline_id(self, mode: str) -> str:
        self.check_mode(mode)
        return "fake_omni_moe"

    def combine_engine_outputs(
        self, outputs: Sequence[StageOutput], mode: str
    ) -> tuple[StageOutput, ...]:
        return keep_final_outputs(outputs, self.build_stage_configs(mode))
