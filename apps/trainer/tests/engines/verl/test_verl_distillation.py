"""On-policy distillation on the verl engine, on CPU: the OPD recipe's translated config
(golden, and accepted by verl's own dataclasses and ``validate_config``), verl's constraints
as our errors before launch, the teacher server's prompt log-probs read back by verl's own
teacher client, and the tokenizer check before launch.

Slow: imports verl (~25 s) and vLLM (~22 s, through verl's vLLM server). Regenerate the
golden deliberately: ``OMNI_RL_UPDATE_GOLDEN=1 uv run pytest apps/trainer/tests/engines/verl/test_verl_distillation.py``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from omegaconf import DictConfig, OmegaConf

from omni_trainer.config import ConfigError, load_config
from omni_trainer.engines.verl.translate import to_verl_config

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[5]
GOLDEN = Path(__file__).parent / "golden" / "mmk12_opd_lora.yaml"
QWEN3_LORA = (["q_proj", "k_proj", "v_proj", "o_proj"], r".*(visual|audio_tower|lm_head|talker|code2wav).*")
EXTRAS = all(importlib.util.find_spec(name) for name in ("verl", "ray", "vllm", "vllm_omni"))
if not EXTRAS:  # pragma: no cover
    pytest.skip("needs the extras (uv sync --extra distributed --extra gpu)", allow_module_level=True)


def opd_overrides(tmp_path: Path) -> list[str]:
    """The arguments examples/mmk12_opd_lora.sh passes (a stand-in ``uv`` prints them)."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "uv").write_text('#!/usr/bin/env bash\nshift 2\nprintf "%s\\n" "$@"\n')
    (fake / "uv").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "TRAIN_FILE": "/data/train.parquet",
           "VAL_FILE": "/data/val.parquet", "MODEL_PATH": "/models/student", "TEACHER_PATH": "/models/teacher"}
    script = ROOT / "examples" / "mmk12_opd_lora.sh"
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def opd_verl_config(tmp_path: Path, *extra: str) -> DictConfig:
    config = load_config(opd_overrides(tmp_path) + list(extra))
    return to_verl_config(config, lora_target_modules=QWEN3_LORA[0], lora_exclude_modules=QWEN3_LORA[1])


def test_opd_recipe_translates_to_a_config_verl_accepts(tmp_path: Path) -> None:
    verl = opd_verl_config(tmp_path)
    resolved = OmegaConf.to_yaml(verl, resolve=True)
    if os.environ.get("OMNI_RL_UPDATE_GOLDEN"):
        GOLDEN.write_text(resolved)
    assert resolved == GOLDEN.read_text()

    from verl.trainer.ppo.utils import need_critic, need_reference_policy, need_teacher_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    from omni_trainer.engines.verl.distillation import validate_with_verl

    validate_with_verl(verl)
    validate_config(config=verl, use_reference_policy=need_reference_policy(verl), use_critic=need_critic(verl))
    assert need_teacher_policy(verl)
    distillation = omega_conf_to_dataclass(verl.distillation)  # what verl's trainer and agent loops build
    loss = distillation.distillation_loss
    assert (loss.loss_mode, loss.use_policy_gradient, loss.policy_loss_mode) == ("kl", True, "vanilla")
    assert loss.loss_settings.use_estimator and not loss.loss_settings.use_topk  # teacher sends prompt_logprobs=0
    assert (loss.clip_ratio_low, loss.clip_ratio_high) == (0.2, 0.2)  # null in our config -> clip_ratio
    teacher = distillation.teacher_models["default"]  # the single teacher takes the whole pool
    assert teacher.model_path == "/models/teacher" and teacher.inference.name == "vllm_omni"  # our replica
    # One node of 8 GPUs with TP=2 per replica -> 4 replicas; the teacher scores prompt + response
    # (4096 + 1024 tokens) and generates one token.
    assert (distillation.nnodes, distillation.n_gpus_per_node, teacher.num_replicas) == (1, 8, 4)
    assert (teacher.inference.prompt_length, teacher.inference.response_length) == (4096 + 1024, 1)
    assert (verl.trainer.nnodes, verl.trainer.n_gpus_per_node) == (1, 8)  # the student's own node


def test_verl_constraints_are_config_errors_before_launch(tmp_path: Path) -> None:
    from omni_trainer.engines.verl.distillation import validate_with_verl

    refused = {
        "distillation.distillation_loss.loss_mode=forward_kl_topk": "vllm/sglang teacher servers",
        "distillation.distillation_loss.use_policy_gradient=false": "ignores the teacher",
        "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size=3": "not a multiple",
        "distillation.teacher_models.teacher_model.inference.max_model_len=4096": "prompt \\+ response \\+ 1",
        "distillation.teacher_models.teacher_model.inference.name=sglang": "served by the student's rollout here "
                                                                            "\\(vllm_omni\\)",
    }
    for override, reason in refused.items():
        with pytest.raises(ConfigError, match=reason):
            opd_verl_config(tmp_path, override)
    # verl-omni's launchers name the teacher's server: the student's rollout is honoured.
    opd_verl_config(tmp_path, "distillation.teacher_models.teacher_model.inference.name=vllm_omni")
    # A loss verl does not know passes our cheap checks; verl's own dataclass refuses it.
    with pytest.raises(ConfigError, match="verl refuses it.*Unsupported loss mode: nope"):
        validate_with_verl(opd_verl_config(tmp_path, "distillation.distillation_loss.loss_mode=nope"))


def _engine_output(sequence: list[int], num_logprobs: int) -> Any:
    """A vLLM-shaped output: position p > 0 holds the sequence token first (rank p % 7 + 1
    for k = 0, outside the top-k otherwise), then for top-k tokens 100+r at rank r, as vLLM
    orders them; every log-prob is -(p + rank) / 10."""
    from vllm.logprobs import Logprob
    from vllm.outputs import CompletionOutput
    from vllm_omni.outputs import OmniRequestOutput

    entries: list[dict[int, Logprob] | None] = [None]
    for position in range(1, len(sequence)):
        token = sequence[position]
        rank = position % 7 + 1 if num_logprobs == 0 else num_logprobs + position
        entry = {token: Logprob(logprob=-(position + rank) / 10, rank=rank)}
        for top in range(1, num_logprobs + 1):
            entry[100 + top] = Logprob(logprob=-(position + top) / 10, rank=top)
        entries.append(entry)
    completion = CompletionOutput(index=0, text="", token_ids=[7], cumulative_logprob=None, logprobs=None,
                                  finish_reason="length")
    return OmniRequestOutput(request_id="t", stage_id=0, prompt_token_ids=list(sequence), prompt_logprobs=entries,
                             outputs=[completion], finished=True)


def _teacher_server(omni: Any) -> Any:
    """Our server (no GPU); ``generate`` is verl's own under ours."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from verl_server_stub import stub_server

    return stub_server(omni, max_model_len=4096, prompt_length=4095, response_length=1, global_steps=3)


def test_teacher_server_answers_verls_teacher_client(tmp_path: Path) -> None:
    import torch
    from verl.experimental.teacher_loop.teacher_manager import AsyncTeacherLLMServerManager
    from vllm import SamplingParams

    from omni_rollout.vllm_omni import PromptLogprobsError
    from omni_rollout.vllm_omni.testing import RecordingAsyncOmni

    sequence = [11, 12, 13, 14, 15, 16]  # prompt + the student's sampled response
    outputs = {"current": _engine_output(sequence, num_logprobs=0)}
    omni = RecordingAsyncOmni([SamplingParams()], respond=lambda *_: [outputs["current"]])
    server = _teacher_server(omni)

    class Client:  # verl's LLMServerClient, minus the load balancer
        async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                           mm_processor_output: Any = None, **kwargs: Any) -> Any:
            return await server.generate(prompt_ids=prompt_ids, sampling_params=dict(sampling_params),
                                         request_id=request_id, **kwargs)

    manager = AsyncTeacherLLMServerManager(opd_verl_config(tmp_path), {"default": Client()})  # type: ignore[dict-item]
    ids, logprobs = asyncio.run(manager.compute_teacher_logprobs_single(sequence_ids=sequence))
    call = omni.calls[0][1]
    params = call["sampling_params_list"][0]
    assert (params.max_tokens, params.prompt_logprobs, params.temperature) == (1, 0, 1.0)
    assert call["prompt"]["prompt_token_ids"] == sequence
    # [S, 1]: row i is the teacher's log-prob of token i + 1 (vLLM has none for token 0), the
    # last row padding; position p's token has rank p % 7 + 1 -> log-prob -(p + p % 7 + 1) / 10.
    assert ids.shape == logprobs.shape == (6, 1)
    assert ids[:, 0].tolist() == [12, 13, 14, 15, 16, 0]
    expected = [-(p + p % 7 + 1) / 10 for p in range(1, 6)] + [0.0]
    assert torch.allclose(logprobs[:, 0], torch.tensor(expected, dtype=logprobs.dtype))

    # Top-k (k = 2) through the same path: row 0 (about position 1) holds tokens 101, 102 at
    # ranks 1, 2 -> log-probs -0.2, -0.3; the padding row is k wide.
    outputs["current"] = _engine_output(sequence, num_logprobs=2)
    top = asyncio.run(server.generate(prompt_ids=sequence, sampling_params={"max_tokens": 1, "prompt_logprobs": 2},
                                      request_id="k2"))
    assert top.extra_fields["prompt_ids"][0] == [101, 102] and top.extra_fields["prompt_logprobs"][0] == [-0.2, -0.3]
    assert top.extra_fields["prompt_ids"][-1] == [0, 0]
    # An engine that scored another sequence (media expanded differently) is refused.
    outputs["current"] = _engine_output(sequence + [17], num_logprobs=0)
    with pytest.raises(PromptLogprobsError, match="expanded the media placeholders differently"):
        asyncio.run(server.generate(prompt_ids=sequence, sampling_params={"max_tokens": 1, "prompt_logprobs": 0},
                                    request_id="bad"))


def test_tokenizer_mismatch_stops_the_launch_before_ray(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from omni_qwen3.tiny import build_tiny_qwen3_omni
    from omni_trainer.engines.verl.launch import run
    from omni_trainer.resolved import resolve_run

    student = build_tiny_qwen3_omni(tmp_path / "student")
    teacher = tmp_path / "teacher"
    shutil.copytree(student, teacher)
    tokenizer = AutoTokenizer.from_pretrained(teacher)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|teacher_only|>"]})
    tokenizer.save_pretrained(teacher)
    config = load_config([
        "trainer.engine=verl", f"actor_rollout_ref.model.path={student}", "data.train_files=[/d.parquet]",
        "distillation.enabled=true", f"distillation.teacher_models.teacher_model.model_path={teacher}",
        "distillation.n_gpus_per_node=1", f"trainer.default_local_dir={tmp_path / 'run'}",
    ])
    with pytest.raises(ConfigError, match="teacher_model.model_path=.*tokenizers differ"):
        run(resolve_run(config))
    assert not (tmp_path / "run" / "verl_config.yaml").exists()  # written just before ray.init
