"""Checkpoints this workspace did not build train with the local engine: verl-omni's tiny
Qwen3-Omni (its layout: ``vision_start_token_id`` in ``talker_config`` only), and two model
packages written by a third party against omni_contracts' public API only: a plain text-only
causal LM (text_lm_package/) and an image + text model, Qwen2-VL (vision_lm_package/)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

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
    from omni_rollout.placeholders import policy_logit_mask

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


# --- the third-party packages: the contract kit, and an image + text model that trains ---------

PACKAGES = {"text_lm_model": HERE / "text_lm_package", "vision_lm_model": HERE / "vision_lm_package"}
ALLOWED_IMPORTS = {"__future__", "collections", "typing", "torch", "transformers", "omni_contracts", *PACKAGES}
PATCH = 14  # the tiny vision model's patch; a 56 x 56 picture: 4 x 4 patches, 4 placeholders
IMAGE_SIDE = 56
PATCHES_PER_IMAGE = (IMAGE_SIDE // PATCH) ** 2


@pytest.fixture(scope="module")
def vision_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_model_kit.tiny import TINY_VISION_PATCH, build_tiny_vision_lm

    assert TINY_VISION_PATCH == PATCH
    return build_tiny_vision_lm(tmp_path_factory.mktemp("vision-lm") / "qwen2-vl")


@pytest.fixture(scope="module")
def third_party() -> dict[str, Any]:
    """Both packages, imported by name from their folders (as OMNI_RL_MODEL_MODULES does)."""
    import importlib

    for folder in PACKAGES.values():
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    return {name: importlib.import_module(name) for name in PACKAGES}


def picture(seed: int) -> Any:
    import numpy as np
    from PIL import Image

    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (IMAGE_SIDE, IMAGE_SIDE, 3), dtype=np.uint8))


def ask_about_a_picture(processor: Any, question: str, seed: int) -> dict[str, Any]:
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return dict(processor(text=[text], images=[picture(seed)], return_tensors="pt"))


def test_the_third_party_packages_import_only_omni_contracts_public_api(third_party: dict[str, Any]) -> None:
    import ast

    import omni_contracts

    for name, folder in PACKAGES.items():
        for source in sorted((folder / name).rglob("*.py")):
            for node in ast.walk(ast.parse(source.read_text())):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    modules = [node.module]
                    if node.module == "omni_contracts":
                        assert {alias.name for alias in node.names} <= set(omni_contracts.__all__), source
                    else:
                        assert not node.module.startswith("omni_contracts."), f"{source}: {node.module}"
                else:
                    continue
                assert {m.split(".")[0] for m in modules} <= ALLOWED_IMPORTS, f"{source}: {modules}"


def test_both_third_party_packages_pass_the_contract_kit(
    third_party: dict[str, Any], vision_lm: Path, tmp_path: Path
) -> None:
    """Every check of omni_contracts.testing that applies to a one-stage model trained whole
    (``check_thinker_policy`` is a thinker policy's only), run on the real tiny checkpoints."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMultimodalLM

    from omni_contracts import RolloutSample, StageOutput, resolve_training_adapter, testing

    text, vision = third_party["text_lm_model"], third_party["vision_lm_model"]
    cases = [
        (text.TextLMAdapter, text.TextLMRolloutAdapter, text.ARCHITECTURE, text.PIPELINE,
         build_text_lm(tmp_path / "text-lm"), AutoModelForCausalLM),
        (vision.VisionLMAdapter, vision.VisionLMRolloutAdapter, vision.ARCHITECTURE, vision.PIPELINE,
         vision_lm, AutoModelForMultimodalLM),
    ]
    for adapter_cls, rollout_cls, architecture, pipeline, path, auto_class in cases:
        testing.check_training_registration(adapter_cls, architecture, "all")
        testing.check_rollout_registration(rollout_cls, pipeline)
        config = AutoConfig.from_pretrained(path)
        adapter = resolve_training_adapter(config, "all", {"freeze_vision_tower": True, "freeze_audio_tower": True})
        assert isinstance(adapter, adapter_cls) and adapter.rollout_pipeline == pipeline
        testing.check_chat_templates(adapter, str(path), config)
        testing.check_processor(adapter, str(path), config)
        model = auto_class.from_pretrained(path)  # what the engines' loader falls back to
        testing.check_strip_modules(adapter, model, config)  # runs configure_model
        testing.check_no_split_modules(model)
        testing.check_no_rebound_methods(model)
        testing.check_logits_to_keep(model, torch.tensor([[9, 12, 15, 18, 21]]))
        testing.check_extra_field_keys(adapter.extra_field_specs)
        testing.check_prepare_model_inputs(adapter, {"input_ids": torch.tensor([[1, 2]])}, {}, config)
        rollout = rollout_cls()
        testing.check_rollout_modes(rollout)
        testing.check_combine_engine_outputs(rollout)
        sample = RolloutSample((1, 2), (3, 4, 5), (1, 1, 1), (-0.1, -0.2, -0.3))
        for mode in rollout.modes:
            kept = testing.check_postprocess_alignment(
                rollout, sample, [StageOutput(0, (3, 4, 5))], mode, adapter.extra_field_specs
            )
            assert kept == sample
    assert text.TextLMAdapter.modalities == ("text",) and not text.TextLMAdapter.takes_media()
    assert vision.VisionLMAdapter.modalities == ("text", "image") and vision.VisionLMAdapter.takes_media()


def test_the_vision_package_processor_and_the_picture_reaching_the_model(
    third_party: dict[str, Any], vision_lm: Path
) -> None:
    """Its OmniProcessor members against the model's own: placeholders expanded per picture,
    mrope positions equal to ``Qwen2VLModel.get_rope_index``'s, one pad per picture after
    ``dedup_pad_tokens``; and logits that change when only the picture does (a wrong image id
    would drop the picture without a word)."""
    import torch
    from transformers import AutoConfig, AutoModelForMultimodalLM

    adapter = third_party["vision_lm_model"].VisionLMAdapter()
    config = AutoConfig.from_pretrained(vision_lm)
    processor = adapter.configure_processor(str(vision_lm), config)
    image_pad, video_pad = processor.pad_token_ids
    assert (image_pad, video_pad) == (config.image_token_id, config.video_token_id)
    inputs = ask_about_a_picture(processor, "What is it?", seed=0)
    ids = inputs["input_ids"][0].tolist()
    assert inputs["image_grid_thw"].tolist() == [[1, IMAGE_SIDE // PATCH, IMAGE_SIDE // PATCH]]
    assert inputs["pixel_values"].shape[0] == PATCHES_PER_IMAGE and ids.count(image_pad) == PATCHES_PER_IMAGE // 4
    deduped = processor.dedup_pad_tokens(inputs["input_ids"][0])
    assert deduped.tolist().count(image_pad) == 1 and len(deduped) == len(ids) - PATCHES_PER_IMAGE // 4 + 1
    model = AutoModelForMultimodalLM.from_pretrained(vision_lm).eval()
    positions, deltas = processor.get_rope_index(
        inputs["input_ids"], inputs["image_grid_thw"], None, inputs["attention_mask"],
        **processor.get_rope_index_kwargs(inputs),
    )
    expected = model.model.get_rope_index(inputs["input_ids"], inputs["mm_token_type_ids"], inputs["image_grid_thw"],
                                          None, inputs["attention_mask"])
    assert positions.dtype == deltas.dtype == torch.int64 and positions.shape == (3, 1, len(ids))
    assert torch.equal(positions, expected[0]) and torch.equal(deltas, expected[1])
    assert int(positions.max()) + 1 < len(ids)  # mrope: the picture's 2 x 2 tokens take 2 positions, not 4
    with torch.no_grad():
        logits = model(**inputs).logits
        other = model(**ask_about_a_picture(processor, "What is it?", seed=1)).logits
    assert not torch.allclose(logits, other)


def test_the_vision_packages_prompts_batch_as_they_run_alone(third_party: dict[str, Any], vision_lm: Path) -> None:
    """Qwen2-VL's processor returns ``mm_token_type_ids`` ``[1, P]`` (which its mrope reads):
    the rollout's batch and the actor's micro-batch left-pad them with the prompts and extend
    them over the response. Each row of a batch of prompts of different lengths, one of them
    text only, scores its response as it does alone. Before, both concatenated them as media
    rows: the rollout failed on prompts of different lengths ("Sizes of tensors must match
    except in dimension 0"), and the actor's first forward on any ("IndexError: The shape of
    the mask [61] at index 0 does not match the shape of the indexed tensor [57]")."""
    import torch
    from transformers import AutoConfig, AutoModelForMultimodalLM

    from omni_rollout.local_engine import batch_prompts
    from omni_training.batching import collate

    adapter = third_party["vision_lm_model"].VisionLMAdapter()
    config = AutoConfig.from_pretrained(vision_lm)
    processor = adapter.configure_processor(str(vision_lm), config)
    prompts = [ask_about_a_picture(processor, "What is it?", seed=0),
               ask_about_a_picture(processor, "What is in the picture? Look closely.", seed=1),
               dict(processor.tokenizer(["<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"], return_tensors="pt"))]
    assert len({int(p["input_ids"].shape[1]) for p in prompts}) == 3
    model = AutoModelForMultimodalLM.from_pretrained(vision_lm).eval()
    pad = processor.tokenizer.pad_token_id
    batch = batch_prompts(prompts, 2, pad)
    assert batch["mm_token_type_ids"].shape == batch["input_ids"].shape == (6, max(p["input_ids"].shape[1] for p in prompts))
    with torch.no_grad():
        generated = model.generate(**batch, max_new_tokens=3, do_sample=False, pad_token_id=pad)
    responses = [generated[row, batch["input_ids"].shape[1]:] for row in range(0, 6, 2)]
    inputs, resp, _ = collate(prompts, responses, pad_token_id=pad)
    assert inputs["mm_token_type_ids"].shape == inputs["input_ids"].shape
    with torch.no_grad():
        together = model(**inputs).logits[:, -resp.shape[1] - 1 : -1]
        for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
            alone = collate([prompt], [response], pad_token_id=pad)[0]
            expected = model(**alone).logits[0, -resp.shape[1] - 1 : -1]
            assert torch.allclose(together[row], expected, atol=1e-4), row


def image_rows(tmp_path: Path) -> Path:
    """Four image-only questions (the answer is in the picture alone), of different lengths."""
    import io

    from omni_data import rl_row, write_rl_parquet

    questions = ("What is it?", "What is in the picture?", "Describe it.", "What color is it?")
    rows = []
    for index, question in enumerate(questions):
        png = io.BytesIO()
        picture(index).save(png, "PNG")
        rows.append(rl_row(data_source="my/vision", messages=[{"role": "user", "content": f"<image>{question}"}],
                           ground_truth="red", ability="vision", extra_info={"index": index},
                           images=[{"bytes": png.getvalue(), "path": f"{index}.png"}]))
    return write_rl_parquet(rows, tmp_path / "images.parquet")


VISION_TOWER_PROBE = (
    "import json, os, runpy, torch\n"
    "log = open(os.environ['VISION_TOWER_LOG'], 'a')\n"
    "def seen(module, args):\n"
    "    if type(module).__name__ == 'Qwen2VisionTransformerPretrainedModel':\n"
    "        log.write(json.dumps({'patches': int(args[0].shape[0]), 'grad': torch.is_grad_enabled()}) + '\\n')\n"
    "        log.flush()\n"
    "torch.nn.modules.module.register_module_forward_pre_hook(seen)\n"
    "runpy.run_module('omni_trainer.cli', run_name='__main__', alter_sys=True)\n"
)
"""``python -m omni_trainer.cli`` with a global forward pre-hook (torch's, no patching) that logs
each call of Qwen2-VL's vision tower: how many patches it encoded, and whether autograd was on
(the actor's update) or off (the rollout's ``generate``)."""


@pytest.mark.slow
def test_an_image_text_model_package_trains_on_image_rows(vision_lm: Path, tmp_path: Path) -> None:
    """The package in vision_lm_package/ (Qwen2-VL, modalities text and image, its own
    OmniProcessor), loaded by name as an uninstalled checkout is, trains 2 steps on image-only
    questions with the local engine; every sampled and every trained sample's picture went
    through the vision tower."""
    scorer = tmp_path / "scorer.py"
    scorer.write_text(SCORER)
    log = tmp_path / "vision_tower.jsonl"
    env = {**os.environ, "OMNI_RL_MODEL_MODULES": "vision_lm_model", "VISION_TOWER_LOG": str(log),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGES["vision_lm_model"]), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-c", VISION_TOWER_PROBE,
         f"actor_rollout_ref.model.path={vision_lm}", f"data.train_files={image_rows(tmp_path)}",
         f"trainer.default_local_dir={tmp_path / 'run'}", f"reward.custom_reward_function.path={scorer}",
         "reward.num_workers=1", "data.train_batch_size=2", "actor_rollout_ref.rollout.n=4",
         "actor_rollout_ref.actor.ppo_mini_batch_size=2", "data.max_response_length=4",
         "actor_rollout_ref.actor.optim.lr=1e-2", "trainer.total_training_steps=2", "trainer.val_before_train=false",
         "actor_rollout_ref.model.stage=all", "actor_rollout_ref.rollout.pipeline_mode=text"],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "RL dataset: read 4 rows, kept 4, dropped 0" in done.stdout and "step    2/2" in done.stdout
    trained_steps(tmp_path / "run")
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    per_step = 2 * 4 * PATCHES_PER_IMAGE  # 2 prompts x 4 samples, one picture each
    assert sum(c["patches"] for c in calls if not c["grad"]) == 2 * per_step  # sampled with their pictures
    assert sum(c["patches"] for c in calls if c["grad"]) == 2 * per_step  # trained with them
