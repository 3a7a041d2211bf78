"""The training adapter inside verl's FSDP engine build, on the tiny model, on CPU.

Calls the functions verl's engine calls (``_build_module``, ``_build_lora_module``, the
FSDP wrap policy) on an ``OmniFSDPEngine`` without FSDP itself (which needs a GPU here).
Needs the distributed extra.
"""

from __future__ import annotations

import socket
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the distributed extra (uv sync --extra distributed --extra gpu)")

import torch  # noqa: E402

from omni_contracts import SchemaError  # noqa: E402

from omni_verl.settings import OMNI_MODEL_TYPE, SETTINGS_ENV, VerlSettings  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    return str(build_tiny_qwen3_omni(tmp_path_factory.mktemp("tiny") / "ckpt", seed=0))


@pytest.fixture(scope="module")
def process_group() -> object:
    """verl's weight-init context asks torch.distributed for the rank: one gloo process."""
    if not torch.distributed.is_initialized():
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    torch.distributed.destroy_process_group()


def _engine(tiny_path: str, lora_rank: int = 8) -> object:
    """An OmniFSDPEngine with the attributes ``_build_module`` reads, built without
    ``__init__`` (which creates a device mesh for FSDP)."""
    from transformers import AutoConfig

    from omni_verl.engine import OmniFSDPEngine

    engine = object.__new__(OmniFSDPEngine)
    engine.model_config = SimpleNamespace(
        model_type=OMNI_MODEL_TYPE, hf_config=AutoConfig.from_pretrained(tiny_path), local_path=tiny_path,
        trust_remote_code=False, use_liger=False, fused_kernel_options={}, use_fused_kernels=False,
        enable_gradient_checkpointing=True, lora_rank=lora_rank, lora_alpha=2 * lora_rank,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], target_parameters=None,
        exclude_modules=r".*(visual|audio_tower|lm_head|talker|code2wav).*", lora_adapter_path=None,
    )
    engine.engine_config = SimpleNamespace(model_dtype="fp32", forward_only=False)
    engine.device_mesh = None
    engine.use_remove_padding = False
    engine.ulysses_sequence_parallel_size = 1
    return engine


def test_build_module_applies_adapter_before_lora_and_fsdp(
    tiny_path: str, process_group: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from verl.utils.fsdp_utils import get_fsdp_wrap_policy

    from omni_contracts import testing
    from omni_qwen3.thinker_policy import THINKER_DECODER_LAYER, Qwen3OmniThinkerPolicy

    monkeypatch.setenv(SETTINGS_ENV, VerlSettings(model_path=tiny_path).to_env())
    engine = _engine(tiny_path)
    module = engine._build_module()

    # verl loaded the adapter's policy class (the thinker alone, no speech stages, nothing
    # re-bound), FSDP shards at the thinker's decoder layers, configure_model froze the encoders.
    assert type(module) is Qwen3OmniThinkerPolicy
    assert [name for name, _ in module.named_children()] == ["thinker"]
    testing.check_no_rebound_methods(module)
    assert module._no_split_modules == [THINKER_DECODER_LAYER]
    assert not any(p.requires_grad for p in module.thinker.visual.parameters())
    assert not any(p.requires_grad for p in module.thinker.audio_tower.parameters())
    # verl's loader saw its own model type and the engine's is restored afterwards.
    assert engine.model_config.model_type == OMNI_MODEL_TYPE

    module = engine._build_lora_module(module)
    lora = module.peft_config["default"]
    assert (lora.r, lora.lora_alpha) == (8, 16)
    assert set(lora.target_modules) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    lora_names = [n for n, p in module.named_parameters() if p.requires_grad]
    assert lora_names and all("lora_" in n for n in lora_names)
    assert all(".thinker.model.layers." in n for n in lora_names)  # never encoders or heads

    # The wrap policy verl gives FSDP wraps each thinker decoder layer as its own unit.
    policy = get_fsdp_wrap_policy(module=module, config={"min_num_params": 0}, is_lora=True)
    layers = [m for m in module.modules() if type(m).__name__ == THINKER_DECODER_LAYER]
    assert layers
    assert all(policy(module=layer, recurse=False, nonwrapped_numel=0) for layer in layers)
    # and not an arbitrary leaf (the lm_head), which rides with its parent's unit
    assert not policy(module=module.base_model.model.thinker.lm_head, recurse=False, nonwrapped_numel=0)


@pytest.mark.parametrize(("lora_dtype", "adapter_dtype"), [(None, torch.bfloat16), ("float32", torch.float32)])
def test_lora_dtype_keeps_the_adapter_apart_from_a_bf16_base(
    tiny_path: str, process_group: object, monkeypatch: pytest.MonkeyPatch, lora_dtype: str | None,
    adapter_dtype: torch.dtype,
) -> None:
    """verl-omni's launchers load the base in bf16 with ``lora_dtype=float32``: verl casts the
    adapter to the base's dtype, our engine casts it back (and PEFT stops casting its input)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    monkeypatch.setenv(SETTINGS_ENV, VerlSettings(model_path=tiny_path, lora_dtype=lora_dtype).to_env())
    engine: Any = _engine(tiny_path)
    engine.engine_config.model_dtype = "bf16"
    module = engine._build_lora_module(engine._build_module())
    assert {p.dtype for p in module.parameters() if p.requires_grad} == {adapter_dtype}
    assert {p.dtype for p in module.parameters() if not p.requires_grad} == {torch.bfloat16}
    layers = [m for m in module.modules() if isinstance(m, BaseTunerLayer)]
    assert layers and all(getattr(m, "cast_input_dtype_enabled", True) is (lora_dtype is None) for m in layers)


def test_build_module_without_settings_explains(tiny_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SETTINGS_ENV, raising=False)
    with pytest.raises(RuntimeError, match="trainer.engine=verl"):
        _engine(tiny_path)._build_module()


def test_verl_loader_still_branches_on_language_model() -> None:
    """``_as_language_model`` exists because verl's loader only loads a causal LM for
    ``model_type == "language_model"``; this fails when upstream changes that."""
    import inspect

    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    source = inspect.getsource(FSDPEngine._build_module)
    assert 'self.model_config.model_type == "language_model"' in source
    assert "_verl_strip_modules" in source


def test_extra_fields_reach_the_forward_from_either_of_verls_batch_layouts() -> None:
    """The talker adapter's fields, as verl's batch-returning worker lays them out (one
    non-tensor entry per key) and as its TransferQueue worker does (each row's whole
    ``extra_fields`` dict, built by verl's own ``list_of_dict_to_tensordict``), reach the
    forward's keyword arguments; packed rows are refused."""
    from tensordict import TensorDict
    from tensordict.tensorclass import NonTensorData, NonTensorStack
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    from omni_qwen3.talker_adapter import Qwen3OmniTalkerAdapter
    from omni_qwen3.talker_fields import RESIDUAL_CODES, SOURCE_IDS
    from omni_verl.engine import adapter_model_inputs

    rows = [{RESIDUAL_CODES: torch.full((n, 3), n), SOURCE_IDS: torch.arange(4 + n), "global_steps": 1} for n in (2, 5)]
    inputs = {"input_ids": torch.zeros(2, 9, dtype=torch.long), "attention_mask": torch.ones(2, 9, dtype=torch.long)}
    flat = TensorDict({key: NonTensorStack.from_list([NonTensorData(r[key]) for r in rows])
                       for key in (RESIDUAL_CODES, SOURCE_IDS)}, batch_size=[2])
    nested = list_of_dict_to_tensordict([{"responses": torch.zeros(3), "extra_fields": r} for r in rows])
    adapter = Qwen3OmniTalkerAdapter()
    for micro_batch in (flat, nested):
        prepared = adapter_model_inputs(adapter, None, dict(inputs), micro_batch)
        assert [c.shape[0] for c in prepared["residual_codes"]] == [2, 5]
        assert [s.tolist() for s in prepared["talker_source_ids"]] == [list(range(6)), list(range(9))]
    with pytest.raises(ValueError, match="use_remove_padding=false"):
        adapter_model_inputs(adapter, None, {"input_ids": inputs["input_ids"], "attention_mask": None}, flat)
    # A thinker adapter declares no fields: its inputs pass through untouched.
    from omni_qwen3.training_adapter import Qwen3OmniThinkerAdapter

    assert adapter_model_inputs(Qwen3OmniThinkerAdapter(), None, dict(inputs), flat) == inputs


def test_select_synced_weights_keeps_the_stage_and_reads_the_stream_to_its_end() -> None:
    from omni_verl.engine import select_synced_weights

    read: list[str] = []

    def stream() -> Any:
        for name in ("thinker.a", "talker.b", "code2wav.c", "talker.d", "thinker.e"):
            read.append(name)  # a distributed actor gathers each tensor here, on every rank
            yield name, len(read)

    assert list(select_synced_weights(stream(), ("talker.",))) == [("talker.b", 2), ("talker.d", 4)]
    assert read == ["thinker.a", "talker.b", "code2wav.c", "talker.d", "thinker.e"]
    assert list(select_synced_weights([("x", 1), ("y", 2)], None)) == [("x", 1), ("y", 2)]
    with pytest.raises(SchemaError, match=r"No actor parameter is named under \['talker\.'\].*'model\.x'"):
        list(select_synced_weights([("model.x", 1)], ("talker.",)))
