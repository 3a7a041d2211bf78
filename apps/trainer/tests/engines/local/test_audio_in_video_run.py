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
    with pytest.raises(ConfigError, match="data.use_audio_in_video=true: vLLM-Omni's qwen2_5_omni pipeline does not "
                                          "lay a video's soundtrack out"):
        preflight(resolve_run(load_config([*on_verl, "actor_rollout_ref.rollout.pipeline_name=qwen2_5_omni"])))
    monkeypatch.setenv("VLLM_PLUGINS", "vllm_omni_register_models")
    with pytest.raises(ConfigError, match="VLLM_PLUGINS=vllm_omni_register_models leaves out "
                                          "omni_qwen3_soundtrack_positions"):
        preflight(resolve_run(load_config(on_verl)))
