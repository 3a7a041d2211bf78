"""Checkpoints this workspace did not build train with the local engine: verl-omni's tiny
Qwen3-Omni (its layout: ``vision_start_token_id`` in ``talker_config`` only), and a plain
text-only causal LM whose model package is written against omni_contracts' public API."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from omni_trainer.cli import main

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from verl_omni_layout import build_verl_omni_layout  # noqa: E402

# Rewards with variance inside a group (the sum of a response's characters mod 7), so each
# step has a policy gradient to follow.
SCORER = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
    "    return (sum(map(ord, solution_str)) % 7) / 6\n"
)


@pytest.fixture(scope="module")
def verl_omni_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_verl_omni_layout(tmp_path_factory.mktemp("verl-omni") / "Qwen3-Omni")


def text_run(tmp_path: Path, model: Path) -> list[str]:
    """Two steps on four text rows (verl-omni's tiny template takes string contents only)."""
    from omni_data import rl_row, write_rl_parquet

    rows = [rl_row(data_source="openai/gsm8k", messages=[{"role": "user", "content": f"What is {i} + 1?"}],
                   ground_truth=str(i + 1), ability="math", extra_info={"index": i}) for i in range(4)]
    train = write_rl_parquet(rows, tmp_path / "train.parquet")
    scorer = tmp_path / "scorer.py"
    scorer.write_text(SCORER)
    return [
        f"actor_rollout_ref.model.path={model}", f"data.train_files={train}", f"trainer.default_local_dir={tmp_path / 'run'}",
        f"reward.custom_reward_function.path={scorer}", "reward.num_workers=1", "data.train_batch_size=2",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2", "data.max_response_length=4",
        "actor_rollout_ref.actor.optim.lr=1e-2", "trainer.total_training_steps=2", "trainer.val_before_train=false",
    ]


def trained_steps(run: Path) -> list[dict[str, float]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1.0, 2.0]
    for row in rows:
        assert math.isfinite(row["actor/grad_norm"]) and row["training/rollout_actor_probs_pearson_corr"] > 0.99
    assert any(row["actor/grad_norm"] > 0 for row in rows)
    return rows


@pytest.mark.slow
def test_verl_omnis_tiny_checkpoint_trains(verl_omni_tiny: Path, tmp_path: Path) -> None:
    # Today: "ValueError: The thinker config lacks ['vision_start_token_id']", a traceback.
    config = json.loads((verl_omni_tiny / "config.json").read_text())
    assert "vision_start_token_id" not in config["thinker_config"]  # the layout under test
    assert config["talker_config"]["vision_start_token_id"] == 151652 and config["enable_audio_output"] is False
    assert main(text_run(tmp_path, verl_omni_tiny)) == 0
    trained_steps(tmp_path / "run")


def test_a_checkpoint_without_vision_start_token_id_exits_2(
    verl_omni_tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = Path(shutil.copytree(verl_omni_tiny, tmp_path / "broken"))
    config = json.loads((broken / "config.json").read_text())
    del config["talker_config"]["vision_start_token_id"]
    (broken / "config.json").write_text(json.dumps(config))
    from transformers import AutoTokenizer

    vision_start = AutoTokenizer.from_pretrained(broken).convert_tokens_to_ids("<|vision_start|>")
    assert main(text_run(tmp_path, broken)) == 2
    err = capsys.readouterr().err
    assert (f"actor_rollout_ref.model.path={broken}: config.json sets no vision_start_token_id (looked in "
            "thinker_config, talker_config and at the top level)") in err
    assert f"Add \"vision_start_token_id\": {vision_start}, the tokenizer's id of <|vision_start|>, to its thinker_config" in err
    assert "Traceback" not in err and not (tmp_path / "run").exists()


def test_the_verl_rollouts_mask_of_verl_omnis_tiny_checkpoint(verl_omni_tiny: Path) -> None:
    """Its thinker's media ids (the config class's defaults, 151646-151656) lie past its few
    hundred tokens: they cannot be sampled, so the text mask bans the tokenizer's placeholders
    only. Today: SchemaError "Banned ids [151646, ...] lie outside the policy stage's logits"."""
    from transformers import AutoConfig, AutoTokenizer

    from omni_contracts import get_rollout_adapter
    from omni_qwen3.training_adapter import Qwen3OmniThinkerAdapter
    from omni_trainer.verl_engine.processor import policy_logit_mask

    config = AutoConfig.from_pretrained(verl_omni_tiny)
    processor = Qwen3OmniThinkerAdapter().configure_processor(str(verl_omni_tiny), config)
    tokenizer = AutoTokenizer.from_pretrained(verl_omni_tiny)
    assert min(processor.pad_token_ids) >= len(tokenizer) == 512
    mask = policy_logit_mask(get_rollout_adapter("qwen3_omni_moe"), "thinker_only", config, processor, tokenizer)
    named = ("<|image_pad|>", "<|video_pad|>", "<|audio_pad|>", "<|vision_start|>", "<|vision_end|>",
             "<|audio_start|>", "<|audio_end|>")
    assert mask.vocab_size == 512 and mask.banned_token_ids == tuple(sorted(tokenizer.convert_tokens_to_ids(named)))


def build_text_lm(out: Path) -> Path:
    """A tiny ``Qwen2ForCausalLM`` with an offline 512-entry BPE and a ChatML template."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX, Qwen2Tokenizer

    from omni_model_kit.tiny import train_bpe

    vocab, merges = train_bpe(512, ("<|endoftext|>", "<|im_start|>", "<|im_end|>"), PRETOKENIZE_REGEX)
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=merges, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                               unk_token=None)
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.mark.slow
def test_a_text_only_causal_lm_package_trains(tmp_path: Path) -> None:
    """The package in text_lm_package/ (processor = tokenizer, no modalities declared), loaded
    by name as an uninstalled checkout is. Today both engines refused its processor ("lacks
    ['pad_token_ids', 'dedup_pad_tokens', 'get_rope_index', 'get_rope_index_kwargs']")."""
    model = build_text_lm(tmp_path / "text-lm")
    env = {**os.environ, "OMNI_RL_MODEL_MODULES": "text_lm_model",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE / "text_lm_package"), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-m", "omni_trainer.cli", *text_run(tmp_path, model), "actor_rollout_ref.model.stage=all",
         "actor_rollout_ref.rollout.pipeline_mode=text"],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "step    2/2" in done.stdout
    trained_steps(tmp_path / "run")
