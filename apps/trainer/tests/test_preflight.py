"""The pre-flight: every problem at once, before anything loads, exit status 2, no traceback."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from omni_trainer.cli import main
from omni_trainer.config import ConfigError, load_config
from omni_trainer.preflight import preflight
from omni_trainer.resolved import resolve_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_folders import QWEN3, minimal_checkpoint  # noqa: E402


def checkpoint_dir(tmp_path: Path, architecture: str = QWEN3) -> Path:
    """Enough of a checkpoint for the pre-flight (it reads config.json, the tokenizer, the
    chat template and the weights' headers; it loads nothing)."""
    return minimal_checkpoint(tmp_path / "Qwen3-Omni-30B-A3B-Instruct", architecture)


def rl_parquet(path: Path, sources: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"data_source": sources, "prompt": ["q"] * len(sources)}), path)
    return path


def test_adv_estimator_typo_exits_2_naming_the_estimators(capsys: pytest.CaptureFixture[str]) -> None:
    # Today's code printed the config and crashed after the first rollout (~80 s).
    assert main(["--print-config", "algorithm.adv_estimator=grpoo"]) == 2
    err = capsys.readouterr().err
    assert "algorithm.adv_estimator='grpoo'; valid: grpo, grpo_passk, reinforce_plus_plus" in err
    assert "Traceback" not in err


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        preflight(resolve_run(load_config([
            "actor_rollout_ref.actor.policy_loss.loss_mode=gpso", "actor_rollout_ref.actor.loss_agg_mode=mean",
            "actor_rollout_ref.actor.kl_loss_type=k9", "actor_rollout_ref.model.stage=speaker",
            "actor_rollout_ref.rollout.pipeline_mode=talker_only", "actor_rollout_ref.rollout.agent.default_agent_loop=tool",
            "actor_rollout_ref.rollout.n=0", "data.max_response_length=0", "trainer.max_checkpoints_to_keep=0",
            "data.train_batch_size=6", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "trainer.total_training_steps=0",
        ])))
    problems = info.value.problems
    for expected in (
        "actor_rollout_ref.actor.policy_loss.loss_mode='gpso'; valid: cispo, gspo",
        "actor_rollout_ref.actor.loss_agg_mode='mean'; valid:",
        "actor_rollout_ref.actor.kl_loss_type='k9'; valid:",
        "actor_rollout_ref.model.stage='speaker'; valid: all, talker, thinker",
        "actor_rollout_ref.rollout.pipeline_mode='talker_only'; valid: full, talker, thinker_only, thinker_talker",
        "actor_rollout_ref.rollout.agent.default_agent_loop='tool'; valid:",
        "actor_rollout_ref.rollout.n=0 must be >= 1",
        "data.max_response_length=0 must be >= 1",
        "trainer.max_checkpoints_to_keep=0 must be >= 1",
        "data.train_batch_size=6 is not a multiple of actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "trainer.total_training_steps=0 must be >= 1",
    ):
        assert any(expected in problem for problem in problems), (expected, problems)


def test_missing_model_path_and_files_are_user_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([f"actor_rollout_ref.model.path={tmp_path / 'nope'}", f"data.train_files={tmp_path / 'x.parquet'}"]) == 2
    err = capsys.readouterr().err
    assert f"actor_rollout_ref.model.path={tmp_path / 'nope'} is not a directory" in err
    assert f"data.train_files: {tmp_path / 'x.parquet'} does not exist" in err
    assert "Traceback" not in err and "huggingface" not in err.lower().replace("hugging face", "")


def test_unknown_stage_and_architecture_are_problems(tmp_path: Path) -> None:
    # Today: AdapterNotFoundError traceback after the processor loads.
    config = load_config([f"actor_rollout_ref.model.path={checkpoint_dir(tmp_path, 'NoSuchArch')}"])
    with pytest.raises(ConfigError, match=r"No training adapter is registered for architecture 'NoSuchArch'"):
        preflight(resolve_run(config))


def test_a_verl_talker_run_needs_the_talker_mode_and_the_thinkers_words(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--print-config", "actor_rollout_ref.model.stage=talker", "trainer.engine=verl",
            "data.train_files=[/d.parquet]", "actor_rollout_ref.model.path=/m",
            "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe", "reward.audio_rewards=[{name: duration, weight: 1}]"]
    assert main([*base, "actor_rollout_ref.model.use_remove_padding=true", "data.max_spoken_tokens=9",
                 "actor_rollout_ref.rollout.speaker=ethan"]) == 2
    err = capsys.readouterr().err
    for expected in (
        "pipeline_mode='thinker_only' samples stage 0; set actor_rollout_ref.rollout.pipeline_mode to one of talker",
        "set actor_rollout_ref.model.use_remove_padding=false",
        "set data.spoken_text=thinker",
        "data.max_spoken_tokens applies to the local engine",
        "actor_rollout_ref.rollout.speaker: vLLM-Omni's talker speaks with the checkpoint's default voice",
    ):
        assert expected in err, expected
    assert "runs on the local engine only" not in err
    main([*base, "actor_rollout_ref.rollout.pipeline_mode=talker", "data.spoken_text=thinker"])
    err = capsys.readouterr().err  # only the made-up paths are left
    assert "stage=talker" not in err and "spoken_text" not in err and "model.path=/m is not a directory" in err


def test_a_thinker_run_refuses_a_mode_whose_policy_is_the_talker(capsys: pytest.CaptureFixture[str]) -> None:
    # Sampling the talker while training the thinker would train on another stage's tokens.
    assert main(["--print-config", "actor_rollout_ref.rollout.pipeline_mode=talker"]) == 2
    err = capsys.readouterr().err
    assert ("actor_rollout_ref.rollout.pipeline_mode='talker' samples stage 1 as the policy, but "
            "actor_rollout_ref.model.stage=thinker trains stage 0; use one of thinker_only, thinker_talker, full") in err
    assert main(["--print-config", "actor_rollout_ref.rollout.pipeline_mode=thinker_talker"]) == 0


def test_talker_stage_runs_locally_paid_by_audio_rewards(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--print-config", "actor_rollout_ref.model.stage=talker", "trainer.engine=verl",
                 "data.train_files=[/d.parquet]", "data.val_files=[/v.parquet]", "actor_rollout_ref.model.path=/m",
                 "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe"]) == 2
    err = capsys.readouterr().err
    assert "stage=talker runs no validation in this version" in err
    assert "stage=talker needs reward.audio_rewards, e.g. [{name: duration, weight: 1.0}]" in err
    assert "rewards: clipping, duration, http, loudness, silence ('http', with a url" in err
    assert "trainer.talker_drift=true is measured in thinker runs" not in err
    assert main(["--print-config", "actor_rollout_ref.model.stage=talker", "trainer.talker_drift=true"]) == 2
    assert "trainer.talker_drift=true is measured in thinker runs of the local engine only" in capsys.readouterr().err
    assert main(["--print-config", "actor_rollout_ref.actor.talker_drift_coef=10"]) == 2
    assert "talker_drift_coef penalises the drift that trainer.talker_drift measures" in capsys.readouterr().err
    assert "Traceback" not in err


def test_audio_reward_specs_are_checked_before_anything_loads(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--print-config", "actor_rollout_ref.model.stage=talker",
                 "reward.audio_rewards=[{name: durration, weight: 1.0}, {name: silence, weight: -1}]"]) == 2
    err = capsys.readouterr().err
    assert "reward.audio_rewards: Invalid audio reward specs:" in err and "'durration'" in err and "weight" in err
    assert main(["--print-config", "reward.audio_rewards=[{name: duration, weight: 1.0}]"]) == 2
    assert "reward.audio_rewards score speech, which only actor_rollout_ref.model.stage=talker" in capsys.readouterr().err
    assert main(["--print-config", "data.spoken_text=thinker"]) == 2
    assert "data.spoken_text=thinker chooses what a talker run's rows speak" in capsys.readouterr().err
    assert main(["--print-config", "data.spoken_text=answer"]) == 2
    assert "data.spoken_text" in capsys.readouterr().err
    assert main(["--print-config", "trainer.talker_drift_rewards=[{name: loudnes, weight: 1.0}]"]) == 2
    err = capsys.readouterr().err
    assert "trainer.talker_drift_rewards score the drift probes' speech; set trainer.talker_drift=true" in err
    assert "trainer.talker_drift_rewards: Invalid audio reward specs:" in err and "'loudnes'" in err


def test_a_talker_run_on_user_data_needs_no_text_scorer(tmp_path: Path) -> None:
    train = rl_parquet(tmp_path / "data" / "train.parquet", ["my/speech"] * 4)
    config = load_config([
        f"actor_rollout_ref.model.path={checkpoint_dir(tmp_path)}", f"data.train_files=[{train}]",
        "actor_rollout_ref.model.stage=talker", "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "reward.audio_rewards=[{name: duration, weight: 1.0}]",
    ])
    preflight(resolve_run(config))  # no "data_source 'my/speech' has no registered scorer": speech is scored by audio rewards


def test_data_sources_without_a_scorer_are_named(tmp_path: Path) -> None:
    train = rl_parquet(tmp_path / "data" / "train.parquet", ["openai/gsm8k", "my/dataset"])
    base = [f"actor_rollout_ref.model.path={checkpoint_dir(tmp_path)}", f"data.train_files={train}",
            "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2"]
    with pytest.raises(ConfigError, match=r"data_source 'my/dataset' \(in .*train.parquet\) has no registered scorer"):
        preflight(resolve_run(load_config(base)))
    preflight(resolve_run(load_config([*base, "reward.on_unknown_data_source=skip"])))


def test_batch_larger_than_the_train_files(tmp_path: Path) -> None:
    train = rl_parquet(tmp_path / "data" / "train.parquet", ["openai/gsm8k"] * 3)
    with pytest.raises(ConfigError, match=r"data.train_batch_size=8 exceeds the 3 rows of data.train_files"):
        preflight(resolve_run(load_config([f"actor_rollout_ref.model.path={checkpoint_dir(tmp_path)}", f"data.train_files={train}"])))


def test_grpo_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    warnings = preflight(resolve_run(load_config(["actor_rollout_ref.rollout.n=1"])))
    assert any("rollout.n=1 with algorithm.adv_estimator=grpo" in w and "every advantage is 0" in w for w in warnings)
    warnings = preflight(resolve_run(load_config(["actor_rollout_ref.rollout.temperature=0"])))
    assert any("temperature=0 with n=8" in w for w in warnings)
    assert main(["--print-config", "actor_rollout_ref.rollout.n=1"]) == 0
    assert "warning: actor_rollout_ref.rollout.n=1" in capsys.readouterr().err


def test_verl_keys_without_local_meaning_are_refused_by_name() -> None:
    with pytest.raises(ConfigError) as info:
        preflight(resolve_run(load_config(["data.custom_cls.path=/x/ds.py", "data.custom_cls.name=MyDataset", "trainer.device=npu"])))
    problems = "\n".join(info.value.problems)
    assert "data.custom_cls (/x/ds.py:MyDataset) is a verl dataset class" in problems
    assert "trainer.device=npu: the local engine runs on the CPU or one CUDA GPU" in problems
    # verl-omni's audio dataset class does what omni-data's dataset does: accepted, with a note.
    warnings = preflight(resolve_run(load_config(["data.custom_cls.name=QwenOmniRLHFDataset"])))
    assert any("QwenOmniRLHFDataset is not needed" in w for w in warnings)


def test_custom_reward_function_file_is_loaded_and_checked(tmp_path: Path) -> None:
    scorer = tmp_path / "my_reward.py"
    scorer.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n"
                      "    return float(solution_str.strip() == ground_truth)\n")
    preflight(resolve_run(load_config([f"reward.custom_reward_function.path={scorer}"])))
    with pytest.raises(ConfigError, match=r"has no function 'score' .* it defines: compute_score"):
        preflight(resolve_run(load_config([f"reward.custom_reward_function.path={scorer}", "reward.custom_reward_function.name=score"])))


def test_a_judge_needs_a_checkpoint_and_a_reward_function_that_asks_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        preflight(resolve_run(load_config(["reward.reward_model.enable=true"])))
    assert info.value.problems == [
        "reward.reward_model.enable=true needs reward.reward_model.model_path, the judge checkpoint",
        "reward.reward_model.enable=true: the judge is asked by your reward function (it gets reward_router_address "
        "and reward_model_tokenizer); set reward.custom_reward_function.path (omni_rewards.judge asks a judge in a "
        "few lines)",
    ]
    scorer = tmp_path / "judged.py"
    scorer.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n"
                      "    return 0.0\n")
    judged = ["reward.reward_model.enable=true", f"reward.custom_reward_function.path={scorer}"]
    with pytest.raises(ConfigError, match=r"reward.reward_model.model_path=/nowhere is not a checkpoint directory .*hf download"):
        preflight(resolve_run(load_config([*judged, "reward.reward_model.model_path=/nowhere"])))
    from omni_model_kit.tiny import build_tiny_chat_lm

    preflight(resolve_run(load_config([*judged, f"reward.reward_model.model_path={build_tiny_chat_lm()}"])))
    with pytest.raises(ConfigError, match=r"reward.reward_model.rollout.tensor_model_parallel_size=4 is a "
                                          r"verl-engine setting .* serves the judge on the policy's device"):
        preflight(resolve_run(load_config([*judged, f"reward.reward_model.model_path={build_tiny_chat_lm()}",
                                           "reward.reward_model.rollout.tensor_model_parallel_size=4"])))


def test_seed_v1_run_script_overrides_pass_print_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The V1 run script of the seeds (integrating an omni model, section 5), unchanged but
    for the pipeline name, with $HOME/$MODEL_PATH pointing at files that exist: it passes on
    the verl engine; the local engine names the verl-engine keys it cannot honour."""
    home, model = tmp_path, checkpoint_dir(tmp_path)
    rl_parquet(home / "data" / "train.parquet", ["openai/gsm8k"] * 8)
    rl_parquet(home / "data" / "test.parquet", ["openai/gsm8k"] * 8)
    v1 = [
        f"data.train_files={home}/data/train.parquet",
        f"data.val_files={home}/data/test.parquet",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.model.lora_rank=32",
        "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.rollout.agent.default_agent_loop=omni_single_turn_agent",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm_omni.output_mode=ar",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm_omni.pipeline_name=qwen3_omni_moe",
        "trainer.n_gpus_per_node=4",
        "trainer.nnodes=1",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm_omni.max_num_seqs=256",
        "actor_rollout_ref.rollout.cudagraph_capture_sizes=[1,2,4,8,16,32,64,128,256]",
        "+data.mm_processor_kwargs.sampling_rate=16000",
    ]
    assert main(["--print-config", *v1]) == 2
    refused = [line.split("=", 1)[0].removeprefix("  - ") for line in capsys.readouterr().err.splitlines()
               if "is a verl-engine setting" in line]
    assert refused == ["actor_rollout_ref.actor.strategy", "actor_rollout_ref.rollout.engine_kwargs.vllm_omni.max_num_seqs",
                       "actor_rollout_ref.rollout.cudagraph_capture_sizes", "trainer.n_gpus_per_node"]
    if importlib.util.find_spec("verl") is None:
        return
    from omni_trainer.engines.verl import launch

    monkeypatch.setattr(launch, "verl_problems", lambda config: [])  # verl's own checks import verl (~25 s)
    assert main(["--print-config", *v1, "trainer.engine=verl"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"- {home}/data/train.parquet" in out and "max_num_seqs: 256" in out and "sampling_rate: 16000" in out


def test_custom_reward_function_scores_in_the_reward_workers(tmp_path: Path) -> None:
    from omni_rewards import RewardManager, RewardManagerConfig
    from omni_rewards.reward_file import custom_registry

    scorer = tmp_path / "my_reward.py"
    scorer.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):\n"
                      "    return {'score': float(solution_str == ground_truth) + bonus}\n")
    registry = custom_registry(str(scorer), "compute_score", ["my/data"], {"bonus": 0.5})  # verl's reward_kwargs
    with RewardManager(RewardManagerConfig(num_workers=1), registry=registry) as manager:
        result = manager.score_batch(["my/data", "my/data"], ["1", "2"], ["1", "1"])
    assert [o.result["score"] for o in result.outcomes] == [1.5, 0.5]


def test_pipeline_follows_the_model_and_one_that_does_not_serve_it_is_refused(tmp_path: Path) -> None:
    """Unset, the pipeline is the one the model's package declares; naming another is caught
    before anything loads (it would fail after the weights load, finding no policy)."""
    model = checkpoint_dir(tmp_path, "Qwen2_5OmniForConditionalGeneration")
    assert load_config([f"actor_rollout_ref.model.path={model}"]).actor_rollout_ref.rollout.pipeline_name == "qwen2_5_omni"
    with pytest.raises(ConfigError) as info:
        preflight(resolve_run(load_config([f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe"])))
    problems = "\n".join(info.value.problems)
    assert "pipeline_name='qwen3_omni_moe' does not generate with Qwen2_5OmniForConditionalGeneration" in problems
    assert "set actor_rollout_ref.rollout.pipeline_name=qwen2_5_omni" in problems
    try:
        preflight(resolve_run(load_config([f"actor_rollout_ref.model.path={model}"])))
    except ConfigError as exc:
        assert not any("does not generate with" in problem for problem in exc.problems), exc.problems


def test_pipeline_unset_without_a_readable_model_is_explained(tmp_path: Path) -> None:
    config = load_config([f"actor_rollout_ref.model.path={tmp_path / 'missing'}"])
    assert config.actor_rollout_ref.rollout.pipeline_name is None
    with pytest.raises(ConfigError) as info:
        preflight(resolve_run(config))
    assert any("pipeline_name is unset and could not be taken from the model" in p for p in info.value.problems)
    with pytest.raises(ConfigError, match="pipeline_name is unset"):
        config.actor_rollout_ref.rollout.pipeline()

@pytest.mark.parametrize(("overrides", "message"), [
    (["algorithm.rollout_correction.rollout_is=geometric"], "algorithm.rollout_correction: rollout_is='geometric'"),
    (["algorithm.rollout_correction.rollout_rs=token_k1"], "needs rollout_rs_threshold"),
    (["algorithm.rollout_correction.rollout_rs=seq_max_k1", "algorithm.rollout_correction.rollout_rs_threshold=2"],
     "unknown mode seq_max_k1"),
    (["algorithm.sample_source=offline", "algorithm.trainer_type=direct_preference", "algorithm.paired_preference=true",
      "algorithm.rollout_correction.rollout_is=token"], "an offline run (algorithm.sample_source=offline) has no rollout"),
])
def test_rollout_correction_settings_are_checked_before_anything_loads(overrides: list[str], message: str) -> None:
    from omni_trainer.preflight import _rollout_correction
    from omni_trainer.findings import Findings

    found = Findings()
    _rollout_correction(resolve_run(load_config(overrides)), found)
    (problem,) = found.problems
    assert message in problem
