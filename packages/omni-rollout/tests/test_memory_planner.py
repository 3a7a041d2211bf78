"""The rollout memory planner on the seeds' recipes, with the arithmetic worked out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from omni_rollout.memory_planner import (
    GIB,
    ModelShape,
    PlannerError,
    Workload,
    capture_sizes,
    kv_bytes_per_token,
    main,
    model_shape_from_config,
    plan,
)

# Qwen3-Omni-30B-A3B thinker text model: 48 layers, 4 KV heads of 128, bf16. The thinker
# plus its audio and vision encoders is taken as ~31.7e9 parameters (thinker-only load).
QWEN3_OMNI_THINKER = ModelShape(params=31.7e9, layers=48, kv_heads=4, head_dim=128)
H800_GIB = 80.0


def recipe(**overrides: float) -> Workload:
    """The seeds' GPU recipe: 4 x H800 80GB, rollout TP 2 assumed, 1024 + 2048 tokens."""
    fields: dict = {"gpu_gib": H800_GIB, "prompt_length": 1024, "response_length": 2048,
                    "tensor_parallel_size": 2}
    fields.update(overrides)
    return Workload(**fields)


def test_kv_bytes_per_token_splits_heads_over_tp() -> None:
    # 2 (K,V) x 48 layers x 4 heads x 128 dim x 2 bytes = 98_304 bytes at TP 1.
    assert kv_bytes_per_token(QWEN3_OMNI_THINKER, 1) == 98_304
    # TP 2: 2 heads per GPU -> half.
    assert kv_bytes_per_token(QWEN3_OMNI_THINKER, 2) == 49_152
    # TP 8 > 4 heads: each GPU still keeps ceil(4/8) = 1 head -> a quarter.
    assert kv_bytes_per_token(QWEN3_OMNI_THINKER, 8) == 24_576


def test_capture_sizes_are_powers_of_two_up_to_max_num_seqs_or_512() -> None:
    assert capture_sizes(256) == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert capture_sizes(1024)[-1] == 512  # vLLM never captures above 512
    assert capture_sizes(48) == (1, 2, 4, 8, 16, 32, 48)
    assert capture_sizes(1) == (1,)


def test_audio_recipe_gives_point_seven_256_and_captures_to_256() -> None:
    # AVQA: every request has one image (2 MiB) and one audio clip (38 MiB): 40 MiB each.
    # Envelope budget 15% x 80 = 12 GiB = 12288 MiB: 512 x 40 = 20480 > 12288,
    # 256 x 40 = 10240 <= 12288 -> max_num_seqs 256.
    # Headroom = 4 reserved + 0.10 x 80 remap + 256 x 2 MiB graphs (0.5) + 10 envelope
    #          = 22.5 GiB; (80 - 22.5) / 80 = 0.71875 -> 0.70.
    result = plan(QWEN3_OMNI_THINKER, recipe(audio_fraction=1.0, image_fraction=1.0,
                                             prompt_length=4160))
    assert result.gpu_memory_utilization == 0.7
    assert result.max_num_seqs == 256
    assert result.cudagraph_capture_sizes == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert result.envelope_gib == pytest.approx(10.0)
    assert result.graph_pool_gib == pytest.approx(0.5)
    assert result.headroom_gib == pytest.approx(22.5)


def test_text_recipe_keeps_concurrency_and_point_eight() -> None:
    # gsm8k (the base recipe): no encoder envelope, so max_num_seqs stays at the 1024 cap,
    # graphs capped at 512 -> 1 GiB. Headroom = 4 + 8 + 1 = 13; 67 / 80 = 0.8375 -> 0.80.
    result = plan(QWEN3_OMNI_THINKER, recipe())
    assert result.gpu_memory_utilization == 0.8
    assert result.max_num_seqs == 1024
    assert result.cudagraph_capture_sizes[-1] == 512
    assert result.envelope_gib == 0.0


def test_kv_pool_and_capacity_worked_numbers() -> None:
    # Weights per GPU at TP 2: 31.7e9 x 2 bytes / 2 / 2**30 = 29.52 GiB.
    # KV pool = 0.8 x 80 - 29.52 = 34.48 GiB; / 49_152 bytes per token = 753_163 tokens;
    # / (1024 + 2048) = 245 sequences < 1024 -> KV-bound (preempts, does not OOM).
    result = plan(QWEN3_OMNI_THINKER, recipe())
    weights = 31.7e9 * 2 / 2 / GIB
    assert result.weights_gib == pytest.approx(weights)
    assert result.kv_pool_gib == pytest.approx(0.8 * 80 - weights)
    assert result.kv_capacity_tokens == int((0.8 * 80 - weights) * GIB // 49_152)
    assert result.kv_capacity_seqs == result.kv_capacity_tokens // 3072 == 245
    assert result.kv_bound
    assert any("preempt" in reason for reason in result.reasons)


def test_short_requests_on_a_big_pool_are_not_kv_bound() -> None:
    # 0.5B-param model on the same GPU: weights 0.93 GiB, the pool holds far more than
    # 1024 sequences of 256 + 256 tokens.
    small = ModelShape(params=0.5e9, layers=24, kv_heads=2, head_dim=64)
    result = plan(small, recipe(prompt_length=256, response_length=256, tensor_parallel_size=1))
    assert not result.kv_bound
    assert result.kv_capacity_seqs >= 1024


def test_weights_that_do_not_fit_raise_with_the_fix() -> None:
    # TP 1: 59.04 GiB of weights in a 0.7 x 80 = 56 GiB pool.
    with pytest.raises(PlannerError, match="raise tensor_parallel_size"):
        plan(QWEN3_OMNI_THINKER, recipe(audio_fraction=1.0, image_fraction=1.0,
                                        tensor_parallel_size=1))


def test_a_policy_sharing_its_gpu_gets_its_part_of_the_pool() -> None:
    # The deploy config splits gpu_memory_utilization over the stages on a GPU; at a policy
    # share of 0.5 the KV pool is 0.8 x 0.5 x 80 - 29.52 = 2.48 GiB (TP 2 weights as above).
    result = plan(QWEN3_OMNI_THINKER, recipe(policy_share=0.5))
    assert result.gpu_memory_utilization == 0.8  # the replica's share, not the policy's part
    assert result.kv_pool_gib == pytest.approx(0.8 * 0.5 * 80 - 31.7e9 * 2 / 2 / GIB)
    with pytest.raises(PlannerError, match="policy share 0.3"):
        plan(QWEN3_OMNI_THINKER, recipe(policy_share=0.3))  # 19.2 GiB for 29.52 GiB of weights
    with pytest.raises(PlannerError, match=r"policy_share must be in \(0, 1\]"):
        recipe(policy_share=0.0)


def test_invalid_workload_lists_every_problem() -> None:
    with pytest.raises(PlannerError, match="gpu_gib must be > 0.*audio_fraction must be in"):
        Workload(gpu_gib=0, prompt_length=1, response_length=1, audio_fraction=1.5)


def test_reads_the_text_model_from_a_qwen3_omni_config(tmp_path: Path) -> None:
    config = {
        "architectures": ["Qwen3OmniMoeForConditionalGeneration"],
        "thinker_config": {"text_config": {
            "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
            "hidden_size": 2048, "head_dim": 128, "torch_dtype": "bfloat16"}},
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert model_shape_from_config(path, 31.7e9) == QWEN3_OMNI_THINKER


def test_config_without_layers_names_the_flags(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{}")
    with pytest.raises(PlannerError, match="--layers/--kv-heads/--head-dim"):
        model_shape_from_config(path, 1e9)


def test_config_with_unknown_dtype_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 2,
                                "hidden_size": 64, "torch_dtype": "int4"}))
    with pytest.raises(PlannerError, match="unknown dtype 'int4'"):
        model_shape_from_config(path, 1e9)


def test_command_reads_the_tiny_style_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # hidden 64 / 4 heads -> head_dim 16, 2 KV heads, 2 layers, fp32:
    # KV per token = 2 x 2 x 2 x 16 x 4 = 512 bytes.
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"thinker_config": {"text_config": {
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "hidden_size": 64, "torch_dtype": "float32"}}}))
    assert kv_bytes_per_token(model_shape_from_config(path, 1e6), 1) == 512
    argv = ["--params", "1e6", "--config", str(path), "--gpu-gib", "24", "--prompt-length",
            "128", "--response-length", "64"]
    assert main(argv) == 0
    assert "max_num_seqs=1024" in capsys.readouterr().out


def test_command_prints_footprint_and_recommendation(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--params", "31.7e9", "--layers", "48", "--kv-heads", "4", "--head-dim", "128",
            "--gpu-gib", "80", "--tp", "2", "--prompt-length", "4160", "--response-length",
            "2048", "--audio-fraction", "1", "--image-fraction", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "gpu_memory_utilization=0.70" in out
    assert "max_num_seqs=256" in out
    assert "cudagraph_capture_sizes=[1,2,4,8,16,32,64,128,256]" in out
    assert "encoder envelope     10.00" in out


def test_command_rejects_missing_model_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--params", "1e9", "--gpu-gib", "80", "--prompt-length", "1", "--response-length", "1"]
    assert main(argv) == 2
    assert "missing ['--layers', '--kv-heads', '--head-dim']" in capsys.readouterr().err
