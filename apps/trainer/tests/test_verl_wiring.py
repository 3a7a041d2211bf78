"""verl engine wiring on CPU: the missing-extras error, our modules in every verl registry
(read back from verl's registries after importing the external module), the Ray runtime
env, the reward function and the dataset class. The heavy imports (verl ~25 s, vLLM ~22 s)
make this module slow; it needs the distributed and gpu extras.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from omni_trainer.verl_engine.errors import EXTRAS_COMMAND, MissingExtrasError, require_extras

pytestmark = pytest.mark.slow
EXTRAS = all(importlib.util.find_spec(name) for name in ("verl", "ray", "vllm", "vllm_omni"))
needs_extras = pytest.mark.skipif(not EXTRAS, reason=f"needs the extras ({EXTRAS_COMMAND})")


def test_missing_extras_error_names_the_install_command() -> None:
    absent = {"vllm", "vllm_omni"}
    with pytest.raises(MissingExtrasError) as caught:
        require_extras(find_spec=lambda name: None if name in absent else object())
    message = str(caught.value)
    assert EXTRAS_COMMAND in message and "vllm, vllm_omni" in message and "gpu extra" in message
    require_extras(find_spec=lambda name: object())  # all present: no error


def test_cli_reports_missing_extras(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from omni_trainer import cli
    from omni_trainer.verl_engine import errors

    monkeypatch.setattr(errors, "REQUIRED_MODULES", {"omni_rl_absent_module": "gpu"})
    code = cli.main(["trainer.engine=verl", "actor_rollout_ref.model.path=/m", "data.train_files=[/d.parquet]"])
    assert code == 2 and EXTRAS_COMMAND in capsys.readouterr().err


@needs_extras
def test_external_module_registers_in_every_verl_registry() -> None:
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY, get_rollout_class
    from verl.workers.rollout.replica import get_rollout_replica_class

    import omni_trainer.verl_engine.external  # noqa: F401  (what VERL_USE_EXTERNAL_MODULES imports)
    from omni_trainer.verl_engine.engine import OmniFSDPEngine
    from omni_trainer.verl_engine.rollout import VllmOmniReplica
    from omni_training.advantages import ADVANTAGE_ESTIMATORS
    from omni_training.policy_loss import POLICY_LOSSES

    for backend in ("fsdp", "fsdp2"):
        assert EngineRegistry._engines["omni_language_model"][backend]["cuda"] is OmniFSDPEngine
    assert EngineRegistry._engines["language_model"]["fsdp2"]["cuda"] is not OmniFSDPEngine  # verl's untouched
    assert get_rollout_replica_class("vllm_omni") is VllmOmniReplica
    assert ("vllm_omni", "async") in _ROLLOUT_REGISTRY
    assert get_rollout_class("vllm_omni", "async").__name__ == "ServerAdapter"
    assert _agent_loop_registry["omni_single_turn_agent"]["_target_"].endswith("OmniSingleTurnAgentLoop")
    # verl implements every loss and estimator omni-training offers (under the same names).
    assert set(POLICY_LOSSES) <= set(POLICY_LOSS_REGISTRY)
    assert set(ADVANTAGE_ESTIMATORS) <= set(ADV_ESTIMATOR_REGISTRY)


@needs_extras
def test_check_algorithms_names_verls_choices() -> None:
    from omni_trainer.verl_engine.external import check_algorithms

    check_algorithms("gspo", "grpo")
    with pytest.raises(ValueError, match="policy loss 'nope'.*gspo"):
        check_algorithms("nope", "grpo")


@needs_extras
def test_external_modules_reach_the_ray_runtime_env() -> None:
    from omni_trainer.config import load_config
    from omni_trainer.verl_engine.launch import ray_init_kwargs
    from omni_trainer.verl_engine.settings import EXTERNAL_MODULE, SETTINGS_ENV
    from omni_trainer.verl_engine.translate import to_verl_config

    config = load_config([
        "trainer.engine=verl", "actor_rollout_ref.model.path=/m", "data.train_files=[/d.parquet]",
        "ray_kwargs.ray_init.address=auto", "ray_kwargs.ray_init.runtime_env.env_vars.MY_VAR=1",
    ])
    kwargs = ray_init_kwargs(to_verl_config(config, lora_target_modules=None, lora_exclude_modules=None))
    env = kwargs["runtime_env"]["env_vars"]
    assert env["VERL_USE_EXTERNAL_MODULES"] == EXTERNAL_MODULE
    assert json.loads(env[SETTINGS_ENV])["model_path"] == "/m"
    assert env["MY_VAR"] == "1" and "VLLM_ALLOW_RUNTIME_LORA_UPDATING" in env  # ours on top of verl's
    assert kwargs["address"] == "auto"


def test_reward_function_counts_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    from omni_rewards import SCORERS
    from omni_trainer.verl_engine import reward

    def broken(solution_str: str, ground_truth: str, extra_info: object = None, **_: object) -> float:
        raise ValueError("scorer bug")

    if "test/broken" not in SCORERS:
        SCORERS.add("test/broken", broken)
    kwargs = {"num_workers": 1, "timeout_s": 20.0, "on_unknown_data_source": "raise"}
    monkeypatch.setattr(reward, "_managers", {})
    ok = reward.compute_score("openai/gsm8k", "The answer is #### 7", "7", {}, **kwargs)
    assert ok["score"] == 1.0 and ok["reward_ok"] == 1.0 and ok["reward_error"] == 0.0
    failed = reward.compute_score("test/broken", "x", "7", {}, **kwargs)
    assert failed["score"] == 0.0 and failed["reward_error"] == 1.0 and failed["reward_ok"] == 0.0
    assert set(ok) == set(failed)  # verl needs the same extra fields on every sample
    for manager in reward._managers.values():
        manager.close()


def test_dataset_rows_have_the_shape_verls_agent_loop_reads(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from omni_trainer.verl_engine.dataset import OmniRLHFDataset

    pytest.importorskip("torch")
    rows = [{
        "data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"What is {i} + 1?"}],
        "ability": "math", "reward_model": {"style": "rule", "ground_truth": str(i + 1)},
        "extra_info": {"index": i, "split": "train"},
    } for i in range(3)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    from omni_qwen3.tiny.chat_template import CHAT_TEMPLATE
    from omni_qwen3.tiny.tokenizer import train_tokenizer

    tokenizer = train_tokenizer()  # small, offline
    tokenizer.chat_template = tokenizer.chat_template or CHAT_TEMPLATE
    dataset = OmniRLHFDataset([str(tmp_path / "train.parquet")], tokenizer, {"max_prompt_length": 256}, None, max_samples=2)
    assert len(dataset) == 2
    row = dataset[1]
    assert row["raw_prompt"] == [{"role": "user", "content": "What is 1 + 1?"}]
    assert row["reward_model"]["ground_truth"] == "2" and row["index"] == 1 and row["data_source"] == "openai/gsm8k"
    assert row["dummy_tensor"].shape == (1,)


class _FakeStages:
    """AsyncOmni's control surface the server's overrides use."""

    def __init__(self, results: list[object]) -> None:
        self.results = results
        self.request_states: dict[str, object] = {}
        self.calls: list[dict[str, object]] = []

    async def collective_rpc(self, **call: object) -> list[object]:
        self.calls.append(call)
        return self.results


@needs_extras
def test_server_overrides_cover_what_asyncomni_lacks() -> None:
    import asyncio
    from types import SimpleNamespace

    from transformers import Qwen3OmniMoeConfig
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer

    from omni_trainer.verl_engine.rollout import VllmOmniHttpServer

    server: Any = object.__new__(VllmOmniHttpServer)
    hf_config = Qwen3OmniMoeConfig()
    server.model_config = SimpleNamespace(hf_config=hf_config)
    server.config = SimpleNamespace(max_model_len=None, enable_chunked_prefill=True, max_num_batched_tokens=8192)
    # verl's own check finds no max_position_embeddings on the composite config ...
    with pytest.raises(ValueError, match="max_position_embeddings"):
        vLLMHttpServer._validate_configs(server)
    # ... ours reads the thinker's text config and leaves the config object as it was.
    server._validate_configs()
    assert server.config.max_model_len == hf_config.get_text_config().max_position_embeddings
    assert server.model_config.hf_config is hf_config

    assert server._resolve_sleep_level() == 1  # AsyncOmni cannot wake from level 2

    server.engine, server.sync_stages = _FakeStages([[None]]), [0]
    asyncio.run(server.wait_for_requests_to_drain())  # AsyncOmni has no such method; verl calls it
    asyncio.run(server.collective_rpc("update_weights_from_ipc", kwargs={"use_shm": False}))
    assert server.engine.calls[0]["stage_ids"] == [0]
    server.engine = _FakeStages([{"supported": False, "error": "boom"}])  # the stage pool's failure shape
    with pytest.raises(RuntimeError, match="boom"):
        asyncio.run(server.collective_rpc("update_weights_from_ipc"))


@needs_extras
def test_deploy_options_round_the_lora_rank_as_verl_does() -> None:
    from types import SimpleNamespace

    from omni_trainer.verl_engine.rollout import _lora_rank, deploy_options

    rollout = SimpleNamespace(
        cudagraph_capture_sizes=None, gpu_memory_utilization=0.5, max_num_seqs=8, max_model_len=1024,
        enforce_eager=True, free_cache_engine=True, enable_prefix_caching=False, dtype="bfloat16",
        logprobs_mode="processed_logprobs", load_format="dummy", max_num_batched_tokens=8192,
        enable_chunked_prefill=True,
    )
    options = deploy_options(rollout, lora_rank=4, seed=0)
    assert options.enable_lora and options.max_lora_rank == 8  # vLLM takes only its MaxLoRARanks
    assert not deploy_options(rollout, lora_rank=0, seed=0).enable_lora
    assert _lora_rank(SimpleNamespace(lora={"rank": 16, "merge": True}, lora_rank=0)) == 0  # merged: no adapter
    assert _lora_rank(SimpleNamespace(lora={}, lora_rank=32)) == 32
