"""Where the thinker's media token ids are read from: thinker_config, then talker_config, then
the top level (verl-omni's tiny checkpoint keeps vision_start_token_id in talker_config only)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from omni_contracts import CheckpointError, OmniContractError
from omni_qwen3.token_ids import complete_thinker_config, find_token_id, missing_token_ids, token_id_problems
from omni_qwen3.training_adapter import Qwen3OmniThinkerAdapter

MEDIA = {"image_token_id": 3, "video_token_id": 4, "audio_token_id": 5, "audio_start_token_id": 8}


def test_each_id_is_read_from_the_thinker_then_the_talker_then_the_top_level() -> None:
    config = {"thinker_config": {"vision_start_token_id": 1}, "talker_config": {"vision_start_token_id": 2},
              "vision_start_token_id": 3}
    assert find_token_id(config, "vision_start_token_id") == (1, "thinker_config")
    del config["thinker_config"]["vision_start_token_id"]
    assert find_token_id(config, "vision_start_token_id") == (2, "talker_config")
    del config["talker_config"]["vision_start_token_id"]
    assert find_token_id(config, "vision_start_token_id") == (3, "the top level")
    del config["vision_start_token_id"]
    assert find_token_id(config, "vision_start_token_id") is None


def test_the_thinker_config_is_completed_from_the_talker() -> None:
    # verl-omni's build_qwen3_omni_tiny_random.py: a default config, vision_start in the talker.
    thinker = SimpleNamespace(**MEDIA)
    config = SimpleNamespace(thinker_config=thinker, talker_config=SimpleNamespace(vision_start_token_id=6))
    assert complete_thinker_config(config) is thinker
    assert thinker.vision_start_token_id == 6 and thinker.image_token_id == 3


def test_an_id_set_nowhere_is_a_user_error_naming_it() -> None:
    config = SimpleNamespace(thinker_config=SimpleNamespace(**MEDIA), talker_config=SimpleNamespace())
    with pytest.raises(CheckpointError, match=r"sets none of \['vision_start_token_id'\] .* <\|vision_start\|>"):
        complete_thinker_config(config)
    with pytest.raises(OmniContractError, match="with a thinker_config, got SimpleNamespace"):
        complete_thinker_config(SimpleNamespace())


def test_the_preflight_names_the_key_and_the_value_to_write(tmp_path: Any) -> None:
    config_json = {"architectures": ["Qwen3OmniMoeForConditionalGeneration"], "thinker_config": dict(MEDIA),
                   "talker_config": {}}
    assert missing_token_ids(config_json) == ["vision_start_token_id"]
    assert token_id_problems(config_json, {"<|vision_start|>": 6}) == [
        "config.json sets no vision_start_token_id (looked in thinker_config, talker_config and at the top level); "
        "the thinker needs it to place media and compute positions. Add \"vision_start_token_id\": 6, the "
        "tokenizer's id of <|vision_start|>, to its thinker_config"
    ]
    # The adapter's pre-flight hook reads the id to suggest from the checkpoint's tokenizer.json.
    (tmp_path / "tokenizer.json").write_text('{"added_tokens": [{"id": 6, "content": "<|vision_start|>"}]}')
    (problem,) = Qwen3OmniThinkerAdapter().checkpoint_problems(str(tmp_path), config_json)
    assert '"vision_start_token_id": 6, the tokenizer\'s id of <|vision_start|>' in problem
    config_json["talker_config"] = {"vision_start_token_id": 6}
    assert Qwen3OmniThinkerAdapter().checkpoint_problems(str(tmp_path), config_json) == []
