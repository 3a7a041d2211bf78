"""``data.use_audio_in_video=true`` on the local engine: the built-in clip task (videos whose
soundtracks beep) trains with each soundtrack interleaved among its frames, and the sampler and
the actor see the same sequence; the keys that say it, and the runs that do not take it yet
(the verl engine's runs: ``engines/verl/test_verl_cpu_run.py``, ``test_verl_translate.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from omni_trainer.cli import main
from omni_trainer.config import ConfigError, load_config
from omni_trainer.preflight import preflight
from omni_trainer.resolved import resolve_run


@pytest.mark.slow
def test_the_built_in_clip_task_trains_with_each_soundtrack_heard(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every row's prompt holds its soundtrack's audio tokens among the frames (the load report
    counts them per row), and on every step the sampler's log-probs equal the actor's
    (Pearson >= 0.999): an actor that lost the switch lays the block out as audio alone and
    measured 0.98 here."""
    run = tmp_path / "run"
    assert main([
        "data.use_audio_in_video=true", "data.builtin_task_size=8", "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4",
        "trainer.total_training_steps=3", "trainer.test_freq=0", "trainer.save_freq=0",
        "trainer.val_before_train=false", f"trainer.default_local_dir={run}",
    ]) == 0
    out = capsys.readouterr().out
    assert "RL dataset: read 8 rows, kept 8, dropped 0 (none)" in out
    assert "8 rows hear their videos' soundtracks (26-26 audio tokens among the frames a row)" in out  # 2 s at 13/s
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [step for step in steps if step["step"] >= 1]
    assert [step["step"] for step in steps] == [1, 2, 3]
    for step in steps:
        assert step["training/rollout_actor_probs_pearson_corr"] >= 0.999, step


def test_verl_omnis_spelling_says_the_same_and_the_runs_that_do_not_hear_yet_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """verl-omni's key folds into ours; the talker stage, offline preference runs and a rollout
    that lays soundtracks out otherwise (Qwen2.5-Omni's vLLM-Omni pipeline, or Qwen3-Omni's
    without omni-qwen3's vLLM plugin) are refused, naming why."""
    assert load_config(["data.mm_processor_kwargs.use_audio_in_video=true"]).data.use_audio_in_video
    with pytest.raises(ConfigError, match="data.mm_processor_kwargs.use_audio_in_video=False contradicts "
                                          "data.use_audio_in_video=True"):
        load_config(["data.use_audio_in_video=true", "data.mm_processor_kwargs.use_audio_in_video=false"])
    for overrides, what in ((["actor_rollout_ref.model.stage=talker"], "stage=talker"),
                            (["algorithm.sample_source=offline"], "algorithm.sample_source=offline")):
        with pytest.raises(ConfigError, match=f"data.use_audio_in_video=true: {what} does not take the videos' "):
            preflight(resolve_run(load_config(["data.use_audio_in_video=true", *overrides])))
    on_verl = ["data.mm_processor_kwargs.use_audio_in_video=true", "trainer.engine=verl"]
    monkeypatch.setenv("VLLM_PLUGINS", "vllm_omni_register_models")
    with pytest.raises(ConfigError, match="VLLM_PLUGINS=vllm_omni_register_models leaves out "
                                          "omni_qwen3_soundtrack_positions"):
        preflight(resolve_run(load_config(on_verl)))
    with pytest.raises(ConfigError, match="VLLM_PLUGINS=vllm_omni_register_models leaves out omni_qwen25_soundtrack"):
        preflight(resolve_run(load_config([*on_verl, "actor_rollout_ref.rollout.pipeline_name=qwen2_5_omni"])))


@pytest.mark.slow
def test_the_clip_task_trains_with_each_soundtrack_as_an_audio_item(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``data.soundtrack_as_audio=true`` (verl-omni's NextQARLHFDataset): each clip's track is an
    audio item after its frames, not among them, and the sampler's log-probs equal the actor's."""
    run = tmp_path / "run"
    assert main([
        "data.soundtrack_as_audio=true", "data.builtin_task_size=8", "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4",
        "trainer.total_training_steps=2", "trainer.test_freq=0", "trainer.save_freq=0",
        "trainer.val_before_train=false", f"trainer.default_local_dir={run}",
    ]) == 0
    out = capsys.readouterr().out
    assert "RL dataset: read 8 rows, kept 8, dropped 0 (none)" in out
    assert "among the frames" not in out  # nothing interleaved
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [step for step in steps if step["step"] >= 1]
    assert [step["step"] for step in steps] == [1, 2]
    for step in steps:
        assert step["training/rollout_actor_probs_pearson_corr"] >= 0.999, step


def test_verl_omnis_nextqa_dataset_class_says_soundtrack_as_audio() -> None:
    """verl-omni's ``data.custom_cls.name=NextQARLHFDataset`` is ``data.soundtrack_as_audio=true``
    here (a warning says so); the two ways of hearing a soundtrack exclude each other; the runs
    that do not take soundtracks yet refuse it; verl gets the key only when it is on."""
    from omni_trainer.engines.verl.translate import to_verl_config

    nextqa = ["data.custom_cls.path=pkg://verl_omni.utils.dataset.nextqa_rl_dataset",
              "data.custom_cls.name=NextQARLHFDataset"]
    config = load_config(nextqa)
    assert config.data.soundtrack_as_audio and not config.data.use_audio_in_video
    warnings = preflight(resolve_run(config))
    assert any("NextQARLHFDataset is not needed" in w and "data.soundtrack_as_audio=True" in w for w in warnings)
    with pytest.raises(ConfigError, match="NextQARLHFDataset means data.soundtrack_as_audio=True, which is set"):
        load_config([*nextqa, "data.soundtrack_as_audio=false"])
    with pytest.raises(ConfigError, match="data.use_audio_in_video and data.soundtrack_as_audio both hear"):
        preflight(resolve_run(load_config(["data.soundtrack_as_audio=true", "data.use_audio_in_video=true"])))
    with pytest.raises(ConfigError, match="data.soundtrack_as_audio=true: stage=talker does not take"):
        preflight(resolve_run(load_config(["data.soundtrack_as_audio=true", "actor_rollout_ref.model.stage=talker"])))
    on_verl = ["trainer.engine=verl", "actor_rollout_ref.model.path=/m", "data.train_files=[/d.parquet]",
               "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe"]
    lora = {"lora_target_modules": ["q_proj"], "lora_exclude_modules": None}
    assert to_verl_config(load_config([*on_verl, "data.soundtrack_as_audio=true"]), **lora).data.soundtrack_as_audio
    assert "soundtrack_as_audio" not in to_verl_config(load_config(on_verl), **lora).data
