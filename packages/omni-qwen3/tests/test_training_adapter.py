from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from omni_contracts import AdapterNotFoundError, get_training_adapter, testing
from omni_qwen3.training_adapter import ARCHITECTURE, Qwen3OmniThinkerAdapter


def conversation(processor: Any, media: Any, seconds: float = 1.0) -> Any:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image"},
                {"type": "audio"},
                {"type": "text", "text": "How many apples are in the picture?"},
            ],
        }
    ]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return processor(text=[text], images=[media.picture()], audio=[media.tone(seconds)], return_tensors="pt")


def test_registered_for_the_thinker_stage() -> None:
    testing.check_training_registration(Qwen3OmniThinkerAdapter, ARCHITECTURE, "thinker")
    assert isinstance(get_training_adapter(ARCHITECTURE, "thinker"), Qwen3OmniThinkerAdapter)


def test_wrong_architecture_and_unknown_stage_are_explained() -> None:
    with pytest.raises(AdapterNotFoundError) as info:
        get_training_adapter("Qwen2AudioForConditionalGeneration", "thinker")
    message = str(info.value)
    assert "architecture 'Qwen2AudioForConditionalGeneration', stage 'thinker'" in message
    assert f"architecture '{ARCHITECTURE}', stage 'thinker'" in message
    assert "qwen3_omni = omni_qwen3.adapters (from omni-qwen3)" in message
    with pytest.raises(AdapterNotFoundError, match=r"Unknown training stage 'vocoder'.*thinker, talker, all"):
        get_training_adapter(ARCHITECTURE, "vocoder")
    with pytest.raises(AdapterNotFoundError, match=r"stage 'all'"):
        get_training_adapter(ARCHITECTURE, "all")  # a stage no package registers for Qwen3-Omni


def test_policy_class_is_the_thinker_alone_and_passes_the_contract_kit(
    policy_model: Any, full_model: Any, tiny_config: Any
) -> None:
    adapter = Qwen3OmniThinkerAdapter()
    assert isinstance(policy_model, adapter.policy_class(tiny_config))
    testing.check_strip_modules(adapter, policy_model, tiny_config)
    testing.check_no_split_modules(policy_model)
    testing.check_no_rebound_methods(policy_model)
    assert policy_model._no_split_modules == ["Qwen3OmniMoeThinkerTextDecoderLayer"]
    testing.check_thinker_policy(policy_model, full_model)
    testing.check_logits_to_keep(policy_model, torch.tensor([[3, 5, 7, 9, 11]]))


def test_configure_model_refuses_the_full_model(full_model: Any, tiny_config: Any) -> None:
    with pytest.raises(TypeError, match=r"Qwen3OmniThinkerPolicy.from_pretrained\(path\)"):
        Qwen3OmniThinkerAdapter().configure_model(full_model, tiny_config)


def test_encoders_are_frozen_by_default_and_on_request(policy_model: Any, tiny_config: Any) -> None:
    Qwen3OmniThinkerAdapter().configure_model(policy_model, tiny_config)
    thinker = policy_model.thinker
    assert not any(p.requires_grad for p in thinker.visual.parameters())
    assert not any(p.requires_grad for p in thinker.audio_tower.parameters())
    assert all(p.requires_grad for p in thinker.model.layers.parameters())


def test_encoders_train_when_asked(policy_model: Any, tiny_config: Any) -> None:
    adapter = Qwen3OmniThinkerAdapter(freeze_vision_tower=False, freeze_audio_tower=False)
    adapter.configure_model(policy_model, tiny_config)
    assert all(p.requires_grad for p in policy_model.thinker.visual.parameters())
    assert all(p.requires_grad for p in policy_model.thinker.audio_tower.parameters())


def test_processor_and_tokenizer_pass_the_contract_kit(tiny_path: Path, tiny_config: Any) -> None:
    testing.check_chat_templates(Qwen3OmniThinkerAdapter(), str(tiny_path), tiny_config)
    testing.check_processor(Qwen3OmniThinkerAdapter(), str(tiny_path), tiny_config)


def test_missing_chat_template_names_the_files_looked_for(
    tmp_path: Path, tiny_path: Path, tiny_config: Any
) -> None:
    copy = tmp_path / "no-template"
    shutil.copytree(tiny_path, copy)
    (copy / "chat_template.json").unlink()
    with pytest.raises(FileNotFoundError) as info:
        Qwen3OmniThinkerAdapter().configure_tokenizer(str(copy), tiny_config)
    message = str(info.value)
    assert str(copy) in message
    assert "tokenizer_config.json has no 'chat_template'" in message
    assert "chat_template.json nor chat_template.jinja" in message


def test_text_image_audio_forward_and_generate(
    tiny_path: Path, tiny_config: Any, policy_model: Any, full_model: Any, media: Any
) -> None:
    adapter = Qwen3OmniThinkerAdapter()
    processor = adapter.configure_processor(str(tiny_path), tiny_config)
    tokenizer = adapter.configure_tokenizer(str(tiny_path), tiny_config)
    adapter.configure_model(policy_model, tiny_config)
    inputs = conversation(processor, media)
    ids = inputs["input_ids"][0].tolist()
    assert ids.count(tiny_config.thinker_config.image_token_id) > 1  # expanded by the processor
    assert ids.count(tiny_config.thinker_config.audio_token_id) > 1
    with torch.no_grad():
        logits = policy_model(**inputs).logits
        silent = dict(inputs, input_features=torch.zeros_like(inputs["input_features"]))
        logits_silent = policy_model(**silent).logits
        upstream = full_model.thinker(**inputs).logits
    assert logits.shape == (1, len(ids), len(tokenizer))
    assert torch.equal(logits, upstream)  # the policy's forward is the checkpoint's thinker
    assert not torch.allclose(logits, logits_silent)  # the audio reaches the model
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    generated = policy_model.generate(**inputs, max_new_tokens=4, do_sample=False, eos_token_id=eos)
    assert generated.shape[0] == 1 and len(ids) < generated.shape[1] <= len(ids) + 4
    assert generated[0, : len(ids)].tolist() == ids
    reference = full_model.thinker.generate(**inputs, max_new_tokens=4, do_sample=False, eos_token_id=eos)
    assert torch.equal(generated, reference)


def test_rope_positions_are_int64_and_match_the_model(
    tiny_path: Path, tiny_config: Any, full_model: Any, media: Any
) -> None:
    processor = Qwen3OmniThinkerAdapter().configure_processor(str(tiny_path), tiny_config)
    inputs = conversation(processor, media)
    audio_lengths = inputs["feature_attention_mask"].sum(-1)
    positions, deltas = processor.get_rope_index(
        inputs["input_ids"], inputs["image_grid_thw"], None, inputs["attention_mask"],
        audio_seqlens=audio_lengths,
    )
    assert positions.dtype == torch.int64 and deltas.dtype == torch.int64
    assert positions.shape == (3, 1, inputs["input_ids"].shape[1])
    upstream, upstream_deltas = full_model.thinker.get_rope_index(
        inputs["input_ids"], inputs["image_grid_thw"], None, inputs["attention_mask"],
        audio_seqlens=audio_lengths,
    )
    assert upstream.dtype == torch.float32  # why the cast exists; fails if upstream fixes it
    assert torch.equal(positions, upstream.long()) and torch.equal(deltas, upstream_deltas.long())
    image_rows = inputs["input_ids"][0] == tiny_config.thinker_config.image_token_id
    assert len(set(positions[1, 0, image_rows].tolist())) > 1  # 2-D positions inside the image


def test_audio_positions_follow_audio_length(tiny_path: Path, tiny_config: Any, media: Any) -> None:
    processor = Qwen3OmniThinkerAdapter().configure_processor(str(tiny_path), tiny_config)
    audio_id = tiny_config.thinker_config.audio_token_id

    def audio_positions(seconds: float) -> tuple[int, int]:
        inputs = conversation(processor, media, seconds)
        positions, _ = processor.get_rope_index(
            inputs["input_ids"], inputs["image_grid_thw"], None, inputs["attention_mask"],
            audio_seqlens=inputs["feature_attention_mask"].sum(-1),
        )
        audio = positions[0, 0, inputs["input_ids"][0] == audio_id]
        return audio.numel(), int(positions[0, 0, -1])

    short_count, short_last = audio_positions(1.0)
    long_count, long_last = audio_positions(3.0)
    assert long_count > short_count
    assert long_last - short_last == long_count - short_count  # text after audio shifts by it


def test_dedup_on_a_processed_prompt(tiny_path: Path, tiny_config: Any, media: Any) -> None:
    processor = Qwen3OmniThinkerAdapter().configure_processor(str(tiny_path), tiny_config)
    ids = conversation(processor, media)["input_ids"][0]
    deduped = processor.dedup_pad_tokens(ids)
    thinker = tiny_config.thinker_config
    assert (deduped == thinker.image_token_id).sum() == 1
    assert (deduped == thinker.audio_token_id).sum() == 1
    pads = torch.isin(ids, torch.tensor([thinker.image_token_id, thinker.audio_token_id]))
    assert torch.equal(deduped[~torch.isin(deduped, torch.tensor(processor.pad_token_ids))], ids[~pads])


def test_prepare_model_inputs_passes_text_batches_through(tiny_config: Any) -> None:
    testing.check_prepare_model_inputs(Qwen3OmniThinkerAdapter(), {"input_ids": [[1, 2]]}, {}, tiny_config)


def test_lora_defaults_target_only_the_thinker_text_attention(policy_model: Any, tiny_config: Any) -> None:
    peft = pytest.importorskip("peft")
    adapter = Qwen3OmniThinkerAdapter()
    adapter.configure_model(policy_model, tiny_config)
    config = peft.LoraConfig(
        r=4,
        target_modules=list(adapter.lora_target_modules),
        exclude_modules=adapter.lora_exclude_modules,
    )
    wrapped = peft.get_peft_model(policy_model, config)
    adapted = sorted(
        name.removeprefix("base_model.model.").removesuffix(".lora_A.default")
        for name, _ in wrapped.named_modules()
        if name.endswith("lora_A.default")
    )
    layers = tiny_config.thinker_config.text_config.num_hidden_layers
    assert adapted == sorted(
        f"thinker.model.layers.{i}.self_attn.{proj}"
        for i in range(layers)
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj")
    )  # the audio tower's q/k/v_proj and the LM head are left alone
