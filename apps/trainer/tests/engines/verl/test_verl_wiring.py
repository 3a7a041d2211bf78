"""verl engine wiring on CPU: the missing-extras error, our modules in every verl registry
(read back from verl's registries after importing the external module), the Ray runtime
env, the reward function and the dataset class. The heavy imports (verl ~25 s, vLLM ~22 s)
make this module slow; it needs the distributed and gpu extras.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from omni_trainer.engines.verl.errors import EXTRAS_COMMAND, MissingExtrasError, require_extras

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


def test_cli_reports_missing_extras(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from omni_trainer import cli
    from omni_trainer.engines.verl import errors

    monkeypatch.setattr(errors, "REQUIRED_MODULES", {"omni_rl_absent_module": "gpu"})
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the app's tests: its shared helpers
    from model_folders import minimal_checkpoint

    model, data = minimal_checkpoint(tmp_path / "m"), tmp_path / "d.parquet"
    from omni_data import rl_row, write_rl_parquet

    write_rl_parquet([rl_row(data_source="openai/gsm8k", messages=[{"role": "user", "content": "1+1?"}],
                             ground_truth="2", ability="math", extra_info={"index": 0})], data)
    code = cli.main(["trainer.engine=verl", f"actor_rollout_ref.model.path={model}", f"data.train_files=[{data}]",
                     "data.train_batch_size=1", "actor_rollout_ref.actor.ppo_mini_batch_size=1"])
    assert code == 2 and EXTRAS_COMMAND in capsys.readouterr().err


@needs_extras
def test_external_module_registers_in_every_verl_registry() -> None:
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY, get_rollout_class
    from verl.workers.rollout.replica import get_rollout_replica_class

    import omni_verl.external  # noqa: F401  (what VERL_USE_EXTERNAL_MODULES imports)
    from omni_verl.engine import OmniFSDPEngine
    from omni_verl.rollout import VllmOmniReplica
    from omni_training.advantages import ADVANTAGE_ESTIMATORS
    from omni_training.policy_loss import POLICY_LOSSES

    for backend in ("fsdp", "fsdp2"):
        assert EngineRegistry._engines["omni_language_model"][backend]["cuda"] is OmniFSDPEngine
    assert EngineRegistry._engines["language_model"]["fsdp2"]["cuda"] is not OmniFSDPEngine  # verl's untouched
    assert get_rollout_replica_class("vllm_omni") is VllmOmniReplica
    assert ("vllm_omni", "async") in _ROLLOUT_REGISTRY
    assert get_rollout_class("vllm_omni", "async").__name__ == "ServerAdapter"
    # verl implements every loss and estimator omni-training offers (under the same names).
    assert set(POLICY_LOSSES) <= set(POLICY_LOSS_REGISTRY)
    assert set(ADVANTAGE_ESTIMATORS) <= set(ADV_ESTIMATOR_REGISTRY)


@needs_extras
def test_check_algorithms_names_verls_choices() -> None:
    from omni_verl.external import check_algorithms

    check_algorithms("gspo", "grpo")
    with pytest.raises(ValueError, match="policy loss 'nope'.*gspo"):
        check_algorithms("nope", "grpo")


@needs_extras
def test_external_modules_reach_the_ray_runtime_env() -> None:
    from omni_trainer.config import load_config
    from omni_trainer.engines.verl.launch import ray_init_kwargs
    from omni_verl.settings import EXTERNAL_MODULE, SETTINGS_ENV
    from omni_trainer.engines.verl.translate import to_verl_config

    config = load_config([
        "trainer.engine=verl", "actor_rollout_ref.model.path=/m", "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe",
            "data.train_files=[/d.parquet]",
        "ray_kwargs.ray_init.address=auto", "ray_kwargs.ray_init.runtime_env.env_vars.MY_VAR=1",
    ])
    kwargs = ray_init_kwargs(to_verl_config(config, lora_target_modules=None, lora_exclude_modules=None))
    env = kwargs["runtime_env"]["env_vars"]
    assert env["VERL_USE_EXTERNAL_MODULES"] == EXTERNAL_MODULE
    assert json.loads(env[SETTINGS_ENV])["model_path"] == "/m"
    assert env["MY_VAR"] == "1" and "VLLM_ALLOW_RUNTIME_LORA_UPDATING" in env  # ours on top of verl's
    assert kwargs["address"] == "auto"


@needs_extras
def test_an_unset_ray_address_starts_a_ray_of_the_runs_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray given no address attaches to a cluster that ``ray start`` left on the machine (then
    refuses ``num_cpus``: seen when two tests ran side by side); ``RAY_ADDRESS`` still attaches."""
    from omni_trainer.config import load_config
    from omni_trainer.engines.verl.launch import ray_init_kwargs
    from omni_trainer.engines.verl.translate import to_verl_config

    config = load_config(["trainer.engine=verl", "actor_rollout_ref.model.path=/m", "data.train_files=[/d.parquet]",
                          "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe"])
    verl = to_verl_config(config, lora_target_modules=None, lora_exclude_modules=None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert ray_init_kwargs(verl)["address"] == "local"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert "address" not in ray_init_kwargs(verl)


def test_reward_function_counts_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    from omni_rewards import SCORERS
    from omni_verl import reward

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
    assert json.loads(failed["reward_fields"]) == {}  # the scorer's own fields: none from a failure
    for manager in reward._managers.values():
        manager.close()


@needs_extras
def test_a_users_reward_file_scores_every_sample_as_verl_calls_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """verl-omni's launchers pass ``reward.custom_reward_function``: verl's own loader, reading
    the translated config in another directory (a Ray worker's), gets our function, which
    calls the user's with its ``reward_kwargs`` for every data source (a built-in one too) and
    counts the user's exceptions as failures."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from omni_trainer.config import load_config
    from omni_verl import reward
    from omni_trainer.engines.verl.translate import to_verl_config

    (tmp_path / "my_reward.py").write_text(
        "def my_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):\n"
        "    if solution_str == 'boom':\n"
        "        raise RuntimeError('scorer bug')\n"
        "    return {'score': float(solution_str == ground_truth) + bonus, 'acc': float(data_source == 'my/source')}\n"
    )
    monkeypatch.chdir(tmp_path)
    config = load_config([
        "trainer.engine=verl", "actor_rollout_ref.model.path=/m", "data.train_files=[/d.parquet]", "reward.num_workers=1",
        "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe",
        "reward.custom_reward_function.path=my_reward.py", "reward.custom_reward_function.name=my_score",
        "reward.custom_reward_function.reward_kwargs.bonus=0.25",
    ])
    verl = to_verl_config(config, lora_target_modules=None, lora_exclude_modules=None)
    monkeypatch.chdir(Path(reward.__file__).parent)
    monkeypatch.setattr(reward, "_managers", {})
    score = get_custom_reward_fn(verl)
    assert score is not None
    try:
        mine = score(data_source="my/source", solution_str="7", ground_truth="7", extra_info={})
        gsm8k = score(data_source="openai/gsm8k", solution_str="7", ground_truth="7", extra_info={})  # built-in: 0
        wrong = score(data_source="my/source", solution_str="8", ground_truth="7", extra_info={})
        failed = score(data_source="my/source", solution_str="boom", ground_truth="7", extra_info={})
    finally:
        for manager in reward._managers.values():
            manager.close()
    assert (mine["score"], mine["acc"], mine["reward_ok"]) == (1.25, 1.0, 1.0)
    assert (gsm8k["score"], gsm8k["acc"]) == (1.25, 0.0)
    assert (wrong["score"], wrong["reward_ok"]) == (0.25, 1.0)
    assert (failed["score"], failed["reward_error"], failed["reward_ok"]) == (0.0, 1.0, 0.0)
    assert set(mine) == set(failed)


def test_dataset_rows_have_the_shape_verls_agent_loop_reads(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from omni_verl.dataset import OmniRLHFDataset

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


def _server(omni: Any, *, dedup: Any = None, **config: Any) -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from verl_server_stub import stub_server

    return stub_server(omni, dedup=dedup, **config)


def _request_output(prompt_ids: list[int], token_ids: list[int], **fields: Any) -> Any:
    """What vLLM-Omni yields for a finished policy stage: a vLLM ``RequestOutput`` (its
    ``OmniRequestOutput`` subclass) with the sampled tokens' log-probs."""
    from vllm.logprobs import Logprob
    from vllm.outputs import CompletionOutput
    from vllm_omni.outputs import OmniRequestOutput

    logprobs = [{t: Logprob(logprob=-0.25 * (i + 1), rank=1)} for i, t in enumerate(token_ids)]
    completion = CompletionOutput(index=0, text="", token_ids=token_ids, cumulative_logprob=None,
                                  logprobs=logprobs, finish_reason="length")
    completion.num_preempted = 2  # type: ignore[attr-defined]  # vLLM sets it when it preempted the request
    return OmniRequestOutput(request_id="r", stage_id=0, prompt_token_ids=prompt_ids, outputs=[completion],
                             finished=True, num_cached_tokens=3, **fields)


def _recording_omni(respond: Any = lambda *_: ()) -> Any:
    from vllm import SamplingParams

    from omni_rollout.vllm_omni.testing import RecordingAsyncOmni

    return RecordingAsyncOmni([SamplingParams(max_tokens=1)], respond=respond)


@needs_extras
def test_verls_own_generate_runs_on_the_driver_with_verls_defaults() -> None:
    """verl's ``vLLMHttpServer.generate`` (not a copy) serves our replica: its repetition
    penalty, ignore_eos and full-determinism seed reach the policy stage, and its token
    ids, log-probs, stop reason and preemption count come back."""
    import asyncio

    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer

    from omni_verl.rollout import VllmOmniHttpServer

    # Ours only wraps verl's (adding a speech policy's sample): verl's own body runs.
    assert VllmOmniHttpServer.__mro__[1] is vLLMHttpServer
    pad = 151655  # a run of pads, which the processor's dedup collapses for vLLM to expand again
    prompt = [1, pad, pad, pad, 2]
    omni = _recording_omni(lambda *_: [_request_output(prompt, [7, 8, 9])])

    def dedup(ids: list[int]) -> list[int]:
        return [t for i, t in enumerate(ids) if not (t == pad and i and ids[i - 1] == pad)]

    server = _server(omni, dedup=dedup, repetition_penalty=1.3, ignore_eos=True, full_determinism=True, seed=40)
    result = asyncio.run(server.generate(prompt_ids=prompt, sampling_params={"temperature": 0.7, "logprobs": True},
                                         request_id="req-1", image_data=["img"]))
    call = omni.calls[0][1]
    (policy,) = call["sampling_params_list"]
    assert (policy.repetition_penalty, policy.ignore_eos, policy.temperature) == (1.3, True, 0.7)
    assert policy.seed == 42  # replica_rank 2 + seed 40, verl's per-replica seed
    assert policy.logprobs == 0 and policy.max_tokens == 16  # verl: sampled-token log-probs, response_length
    assert call["prompt"] == {"prompt_token_ids": [1, pad, 2], "multi_modal_data": {"image": ["img"]}}
    assert call["request_id"] == "req-1"
    assert result.token_ids == [7, 8, 9] and result.log_probs == [-0.25, -0.5, -0.75]
    assert result.stop_reason == "completed" and result.num_preempted == 2
    assert result.extra_fields == {"global_steps": 5, "num_cached_tokens": 3}


@needs_extras
def test_verls_teacher_request_gets_prompt_logprobs_checked_against_its_ids() -> None:
    """A distillation teacher (``max_tokens=1``, ``prompt_logprobs=0``): verl extracts the
    rows; the driver refuses an engine that scored a different sequence."""
    import asyncio

    from vllm.logprobs import Logprob

    from omni_rollout.vllm_omni import PromptLogprobsError

    sequence = [11, 12, 13, 14]
    # Position p holds its own token first, log-prob -p / 10 (vLLM has none for position 0).
    entries = [None] + [{t: Logprob(logprob=-p / 10, rank=p)} for p, t in enumerate(sequence) if p]
    good = _request_output(sequence, [5], prompt_logprobs=entries)
    server = _server(_recording_omni(lambda *_: [good]))
    result = asyncio.run(server.generate(prompt_ids=sequence, sampling_params={"max_tokens": 1, "prompt_logprobs": 0},
                                         request_id="t"))
    # Row i is about token i + 1; a zero row pads the end (verl's layout).
    assert result.extra_fields["prompt_ids"] == [[12], [13], [14], [0]]
    assert result.extra_fields["prompt_logprobs"] == [[-0.1], [-0.2], [-0.3], [0.0]]
    shifted = _request_output(sequence + [15], [5], prompt_logprobs=entries + [{15: Logprob(logprob=-1.0, rank=1)}])
    server = _server(_recording_omni(lambda *_: [shifted]))
    with pytest.raises(PromptLogprobsError, match="expanded the media placeholders differently"):
        asyncio.run(server.generate(prompt_ids=sequence, sampling_params={"max_tokens": 1, "prompt_logprobs": 0},
                                    request_id="t"))


@needs_extras
def test_verls_abort_wake_and_cache_clearing_run_on_the_driver() -> None:
    """Defect 8: verl's ``abort_all_requests`` reads ``engine.output_processor`` and its
    ``wake_up`` / ``clear_kv_cache`` call ``reset_prefix_cache``, which AsyncOmni only logs;
    on the driver each makes the clearing call."""
    import asyncio
    from types import SimpleNamespace as State

    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer

    from omni_verl.rollout import VllmOmniHttpServer

    for name in ("abort_all_requests", "wake_up", "sleep", "clear_kv_cache", "collective_rpc",
                 "wait_for_requests_to_drain", "resume_generation"):
        assert getattr(VllmOmniHttpServer, name) is getattr(vLLMHttpServer, name), name  # verl's, unchanged
    omni = _recording_omni()
    server = _server(omni)
    omni.request_states["req-3-abc"] = State(request_id="req-3-abc", external_request_id="req-3")
    aborted = asyncio.run(server.abort_all_requests())
    assert aborted == {"aborted_count": 1, "request_ids": ["req-3-abc"]}
    assert omni.calls == [("pause_generation", {"mode": "abort", "clear_cache": True, "stage_ids": None})]
    omni.request_states.clear()

    omni.calls.clear()
    asyncio.run(server.sleep())  # colocated: level 1 (our _resolve_sleep_level; AsyncOmni cannot wake from 2)
    asyncio.run(server.wake_up())
    # wake -> scheduling resumes once all is awake (vLLM's engine core does so) -> the cache
    # clearing call on the policy stage, which restores the running state it found.
    # The frontend's multimodal cache is cleared with every stage cache (a sleep drops theirs).
    assert omni.names() == ["sleep", "frontend clear_mm_cache", "wake_up", "resume_generation", "pause_generation",
                            "frontend clear_mm_cache", "resume_generation"]
    assert omni.calls[0][1]["level"] == 1
    assert omni.calls[4][1] == {"mode": "abort", "clear_cache": True, "stage_ids": [0]}
    assert not omni.paused

    omni.calls.clear()
    asyncio.run(server.clear_kv_cache())  # after every weight update
    assert omni.names() == ["pause_generation", "frontend clear_mm_cache", "resume_generation",
                            "frontend clear_mm_cache",
                            "pause_generation", "frontend clear_mm_cache", "resume_generation"]
    assert not any("no-op" in name for name in omni.names())
    asyncio.run(server.wait_for_requests_to_drain())  # nothing in flight: returns


@needs_extras
def test_verls_weight_sync_rpc_reaches_the_sync_stages_and_failures_raise() -> None:
    import asyncio

    omni = _recording_omni()
    server = _server(omni)
    asyncio.run(server.collective_rpc("update_weights_from_ipc", kwargs={"use_shm": False}))
    assert omni.calls[0][1]["stage_ids"] == [0] and omni.calls[0][1]["kwargs"] == {"use_shm": False}
    omni.rpc_results["update_weights_from_ipc"] = [{"supported": False, "error": "boom"}]  # the stage pool's shape
    with pytest.raises(RuntimeError, match="boom"):
        asyncio.run(server.collective_rpc("update_weights_from_ipc"))


@needs_extras
def test_abort_request_goes_through_the_driver() -> None:
    import asyncio
    from types import SimpleNamespace as State

    omni = _recording_omni()
    server = _server(omni)
    assert asyncio.run(server.abort_request("nope"))["aborted"] is False
    omni.request_states["req-9-abc"] = State(request_id="req-9-abc", external_request_id="req-9")
    assert asyncio.run(server.abort_request("req-9")) == {"aborted": True, "request_id": "req-9"}
    assert omni.calls == [("abort", {"request_id": "req-9"})]


@needs_extras
def test_server_overrides_cover_what_asyncomni_lacks() -> None:
    from transformers import Qwen3OmniMoeConfig
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer

    from omni_verl.rollout import VllmOmniHttpServer

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
    # Everything else verl calls on self.engine is the driver's (tests above).
    overridden = {name for name in vars(VllmOmniHttpServer) if not name.startswith("__")}
    assert overridden == {"_post_init", "_validate_configs", "_resolve_sleep_level", "_get_engine_kwargs_key",
                          "_preprocess_engine_kwargs", "run_server", "abort_request", "generate",
                          "mask_policy_logits"}


@needs_extras
def test_verl_omnis_engine_kwargs_do_not_reach_vllms_arguments() -> None:
    """``engine_kwargs.vllm_omni`` carries the pipeline and verl-omni's ``output_mode=ar`` to the
    server (the translated config holds them); none is a vLLM engine argument."""
    from omni_verl.rollout import VllmOmniHttpServer

    server: Any = object.__new__(VllmOmniHttpServer)
    server.config = SimpleNamespace(checkpoint_engine=None)
    kwargs = {"pipeline_name": "qwen3_omni_moe", "pipeline_mode": "thinker_only", "output_mode": "ar", "max_num_seqs": 8}
    server._preprocess_engine_kwargs(kwargs)
    assert kwargs == {"max_num_seqs": 8}


@needs_extras
def test_deploy_options_round_the_lora_rank_as_verl_does(monkeypatch: pytest.MonkeyPatch) -> None:
    from omni_verl.rollout import _lora_rank, deploy_options
    from omni_verl.settings import CPU_PLATFORM_ENV

    monkeypatch.delenv(CPU_PLATFORM_ENV, raising=False)  # an in-process CPU launch earlier in the session sets it

    rollout = SimpleNamespace(
        cudagraph_capture_sizes=None, gpu_memory_utilization=0.5, max_num_seqs=8, max_model_len=1024,
        enforce_eager=True, free_cache_engine=True, enable_prefix_caching=False, dtype="bfloat16",
        logprobs_mode="processed_logprobs", load_format="dummy", max_num_batched_tokens=8192,
        enable_chunked_prefill=True,
    )
    options = deploy_options(rollout, lora_rank=4, seed=0)
    assert options.enable_lora and options.max_lora_rank == 8  # vLLM takes only its MaxLoRARanks
    assert not options.all_stages_eager  # off verl's CPU platform: upstream's stages keep their graphs
    assert not deploy_options(rollout, lora_rank=0, seed=0).enable_lora
    assert _lora_rank(SimpleNamespace(lora={"rank": 16, "merge": True}, lora_rank=0)) == 0  # merged: no adapter
    assert _lora_rank(SimpleNamespace(lora={}, lora_rank=32)) == 32


@needs_extras
def test_on_verls_cpu_platform_every_stage_runs_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's CPU build compiles each stage not run eager with inductor at start-up (77 s for
    the tiny thinker in front of a talker, on 2 cores), and has no CUDA graphs to gain."""
    from omni_verl.rollout import deploy_options
    from omni_verl.settings import CPU_PLATFORM_ENV
    from omni_verl_cpu import PLATFORM as CPU_PLATFORM

    rollout = SimpleNamespace(
        cudagraph_capture_sizes=None, gpu_memory_utilization=0.5, max_num_seqs=8, max_model_len=1024,
        enforce_eager=False, free_cache_engine=False, enable_prefix_caching=False, dtype="float32",
        logprobs_mode="processed_logprobs", load_format="dummy", max_num_batched_tokens=8192,
        enable_chunked_prefill=True,
    )
    monkeypatch.setenv(CPU_PLATFORM_ENV, CPU_PLATFORM)
    assert deploy_options(rollout, lora_rank=0, seed=0).all_stages_eager
    monkeypatch.setenv(CPU_PLATFORM_ENV, "cuda")
    assert not deploy_options(rollout, lora_rank=0, seed=0).all_stages_eager


@needs_extras
def test_a_talker_server_adds_the_sample_built_from_every_stage() -> None:
    """Mode ``talker``: verl's ``generate`` returns the talker's codec tokens and log-probs, and
    ours adds the sample the rollout adapter built from the thinker's text, the talker's codes
    and prefill placeholder and code2wav's waveform, checked against the talker adapter's
    field specs."""
    import asyncio

    import torch
    from vllm import SamplingParams

    from omni_qwen3.talker_fields import RESIDUAL_CODES, SOURCE_IDS, TALKER_FIELDS
    from omni_rollout.vllm_omni.testing import RecordingAsyncOmni
    from omni_rollout.speech_sample import SPEECH_SAMPLE

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from verl_server_stub import stage_output, stub_server

    prompt, spoken, tokens = [1, 2, 3], [20, 21, 2], [40, 41, 99]
    codes = torch.cat([torch.zeros(9, 3, dtype=torch.long), torch.tensor([[40, 5, 6], [41, 7, 8]])])
    logprobs = [-0.5, -1.0, -1.5]
    wave = torch.linspace(-0.5, 0.5, 40)
    outputs = [stage_output(0, prompt, spoken),
               stage_output(1, [0] * 9, tokens, logprobs=logprobs, multimodal_output={"codes": {"audio": codes}}),
               stage_output(2, [], [], multimodal_output={"audio": wave[None], "sr": torch.tensor(24000)})]
    omni = RecordingAsyncOmni([SamplingParams(temperature=0.0, max_tokens=2048), SamplingParams(),
                               SamplingParams(temperature=0.0)], respond=lambda *_: outputs)
    server = stub_server(omni, mode="talker", field_specs=TALKER_FIELDS)
    result = asyncio.run(server.generate(prompt_ids=prompt, sampling_params={"temperature": 1.0, "logprobs": True},
                                         request_id="r"))
    thinker, talker, _ = omni.calls[0][1]["sampling_params_list"]
    assert (talker.temperature, talker.logprobs, thinker.temperature) == (1.0, 0, 0.0)  # verl's params: the talker's
    assert result.token_ids == tokens and result.log_probs == logprobs
    sample = result.extra_fields[SPEECH_SAMPLE]
    assert sample["prompt_ids"] == [0] * 9
    assert sample["fields"][SOURCE_IDS].tolist() == [1, 2, 3, 20, 21]
    assert sample["fields"][RESIDUAL_CODES].tolist() == [[5, 6], [7, 8], [-1, -1]]
    assert torch.equal(sample["waveform"], wave) and sample["sample_rate"] == 24000 and sample["spoken_ids"] == (20, 21)
    assert server.engine.take_stage_outputs("r") == []  # nothing kept once served

    # An aborted talker: verl's empty answer, and no sample.
    outputs[1] = stage_output(1, [0] * 9, [], logprobs=[], finish_reason="abort")
    aborted = asyncio.run(server.generate(prompt_ids=prompt, sampling_params={"logprobs": True}, request_id="a"))
    assert aborted.token_ids == [] and SPEECH_SAMPLE not in aborted.extra_fields


@needs_extras
@pytest.mark.parametrize(("platform", "loaded"), [(None, []), ("cpu", ["omni_verl_cpu.platform"])])
def test_a_run_on_gpus_never_loads_the_cpu_plugin(platform: str | None, loaded: list[str]) -> None:
    """verl imports our external module in every process: on GPUs it loads omni_verl_cpu's names
    only; VERL_PLATFORM=cpu loads its platform (and verl loads the rest by name when a CPU run
    asks for omni_local or omni_gloo)."""
    import os
    import subprocess
    import sys

    env = {key: value for key, value in os.environ.items() if key != "VERL_PLATFORM"}
    if platform:
        env["VERL_PLATFORM"] = platform
    code = ("import sys; import omni_verl.external; import omni_trainer.engines.verl.launch; "
            "print(sorted(m for m in sys.modules if m.startswith('omni_verl_cpu.') and m != 'omni_verl_cpu.policy'))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == repr(loaded)
