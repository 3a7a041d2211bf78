from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from omni_contracts import get_training_adapter, resolve_training_adapter, testing
from omni_qwen25.training_adapter import ARCHITECTURE, Qwen25OmniThinkerAdapter


def conversation(processor: Any, media: Any, seconds: float = 1.0, hz: float = 440.0) -> Any:
    messages = [{"role": "user", "content": [
        {"type": "image"}, {"type": "audio"}, {"type": "text", "text": "How many apples are in the picture?"},
    ]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return processor(text=[text], images=[media.picture()], audio=[media.tone(seconds, hz)], return_tensors="pt")


def test_registered_for_the_thinker_stage_with_its_options() -> None:
    testing.check_training_registration(Qwen25OmniThinkerAdapter, ARCHITECTURE, "thinker")
    assert isinstance(get_training_adapter(ARCHITECTURE, "thinker"), Qwen25OmniThinkerAdapter)
    adapter = resolve_training_adapter(
        {"architectures": [ARCHITECTURE]}, "thinker", {"freeze_audio_tower": False, "unrelated": 1}
    )
    assert isinstance(adapter, Qwen25OmniThinkerAdapter)
    assert (adapter.freeze_vision_tower, adapter.freeze_audio_tower) == (True, False)


def test_policy_class_is_the_thinker_alone_and_passes_the_contract_kit(
    policy_model: Any, full_model: Any, tiny_config: Any
) -> None:
    adapter = Qwen25OmniThinkerAdapter()
    assert isinstance(policy_model, adapter.policy_class(tiny_config))
    testing.check_strip_modules(adapter, policy_model, tiny_config)
    testing.check_no_split_modules(policy_model)
    testing.check_no_rebound_methods(policy_model)
    assert policy_model._no_split_modules == ["Qwen2_5OmniDecoderLayer"]
    testing.check_thinker_policy(policy_model, full_model)
    testing.check_logits_to_keep(policy_model, torch.tensor([[3, 5, 7, 9, 11]]))


def test_configure_model_refuses_the_full_model(full_model: Any, tiny_config: Any) -> None:
    with pytest.raises(TypeError, match=r"Qwen25OmniThinkerPolicy.from_pretrained\(path\)"):
        Qwen25OmniThinkerAdapter().configure_model(full_model, tiny_config)


def test_encoders_are_frozen_by_default_and_train_on_request(tiny_path: Path, tiny_config: Any) -> None:
    from omni_qwen25.thinker_policy import Qwen25OmniThinkerPolicy

    for freeze in (True, False):
        model = Qwen25OmniThinkerPolicy.from_pretrained(tiny_path)
        Qwen25OmniThinkerAdapter(freeze_vision_tower=freeze, freeze_audio_tower=freeze).configure_model(model, tiny_config)
        thinker = model.thinker
        assert all(p.requires_grad != freeze for p in thinker.visual.parameters())
        assert all(p.requires_grad != freeze for p in thinker.audio_tower.parameters())
        assert all(p.requires_grad for p in thinker.model.layers.parameters())


def test_processor_and_tokenizer_pass_the_contract_kit(tiny_path: Path, tiny_config: Any) -> None:
    testing.check_chat_templates(Qwen25OmniThinkerAdapter(), str(tiny_path), tiny_config)
    testing.check_processor(Qwen25OmniThinkerAdapter(), str(tiny_path), tiny_config)


def test_missing_chat_template_names_the_files_looked_for(tmp_path: Path, tiny_path: Path, tiny_config: Any) -> None:
    copy = tmp_path / "no-template"
    shutil.copytree(tiny_path, copy)
    (copy / "chat_template.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"chat_template.json nor chat_template.jinja"):
        Qwen25OmniThinkerAdapter().configure_tokenizer(str(copy), tiny_config)


def test_prepare_model_inputs_passes_batches_through(tiny_config: Any) -> None:
    testing.check_prepare_model_inputs(Qwen25OmniThinkerAdapter(), {"input_ids": [[1, 2]]}, {}, tiny_config)


def test_media_reach_the_thinker_and_generate_runs(
    tiny_path: Path, tiny_config: Any, policy_model: Any, full_model: Any, media: Any
) -> None:
    """The ids-are-right check: with a wrong audio or image id the media are silently ignored."""
    adapter = Qwen25OmniThinkerAdapter()
    processor = adapter.configure_processor(str(tiny_path), tiny_config)
    tokenizer = adapter.configure_tokenizer(str(tiny_path), tiny_config)
    adapter.configure_model(policy_model, tiny_config)
    inputs = conversation(processor, media)
    ids = inputs["input_ids"][0].tolist()
    assert ids.count(tiny_config.thinker_config.image_token_id) > 1  # expanded by the processor
    assert ids.count(tiny_config.thinker_config.audio_token_id) > 1
    with torch.no_grad():
        logits = policy_model(**inputs).logits
        assert torch.equal(logits, full_model.thinker(**inputs).logits)  # the checkpoint's thinker
        other_tone = conversation(processor, media, hz=1234.0)
        assert torch.equal(other_tone["input_ids"], inputs["input_ids"])
        logits_other_tone = policy_model(**other_tone).logits
        other_picture = dict(inputs, pixel_values=torch.zeros_like(inputs["pixel_values"]))
        logits_other_picture = policy_model(**other_picture).logits
    assert logits.shape == (1, len(ids), tiny_config.thinker_config.text_config.vocab_size)
    assert not torch.allclose(logits, logits_other_tone)  # the audio reaches the model
    assert not torch.allclose(logits, logits_other_picture)  # so does the image
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    generated = policy_model.generate(**inputs, max_new_tokens=4, do_sample=False, eos_token_id=eos)
    assert len(ids) < generated.shape[1] <= len(ids) + 4 and generated[0, : len(ids)].tolist() == ids
    reference = full_model.thinker.generate(**inputs, max_new_tokens=4, do_sample=False, eos_token_id=eos)
    assert torch.equal(generated, reference)


def test_lora_defaults_target_only_the_thinker_text_attention(policy_model: Any, tiny_config: Any) -> None:
    import peft

    adapter = Qwen25OmniThinkerAdapter()
    adapter.configure_model(policy_model, tiny_config)
    config = peft.LoraConfig(
        r=4, target_modules=list(adapter.lora_target_modules), exclude_modules=adapter.lora_exclude_modules
    )
    wrapped = peft.get_peft_model(policy_model, config)
    adapted = sorted(
        name.removeprefix("base_model.model.").removesuffix(".lora_A.default")
        for name, _ in wrapped.named_modules()
        if name.endswith("lora_A.default")
    )
    layers = tiny_config.thinker_config.text_config.num_hidden_layers
    assert adapted == sorted(
        f"thinker.model.layers.{i}.self_attn.{proj}" for i in range(layers) for proj in ("q_proj", "k_proj", "v_proj", "o_proj")
    )  # the audio tower's q/k/v_proj, the vision blocks and the LM head are left alone
