"""Offline preference optimisation on the local engine: the embedded run learns, the
reference log-probs are computed once per pair, every batch holds one modality, bad pairs
are counted, and the keys it cannot honour are refused by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from omni_trainer.cli import main
from omni_trainer.config import ConfigError, load_config
from omni_trainer.preflight import preflight
from omni_trainer.resolved import resolve_run

MODALITIES = ("image", "audio", "text")


def metrics_of(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_the_embedded_preference_run_learns_on_every_modality(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert main(["algorithm.sample_source=offline", "trainer.total_training_steps=20",
                 f"trainer.default_local_dir={run}"]) == 0
    rows = metrics_of(run)
    before, after = rows[0], rows[-1]
    # Before any update the policy is its reference: every margin is exactly 0, a tie, and a
    # tie is not a win (strict >, as verl-omni and TRL count it).
    assert before["step"] == 0 and before["val/reward_accuracy"] == 0.0 and before["val/reward_margin"] == 0.0
    assert after["step"] == 20 and after["val/reward_accuracy"] >= 0.9 and after["val/reward_margin"] > 0
    for modality in MODALITIES:
        assert before[f"val/{modality}/num_samples"] == 8 and after[f"val/{modality}/reward_accuracy"] >= 0.9
    steps = [row for row in rows if row["step"] > 0]
    for row in steps:  # one modality per batch, verl-omni's sampler
        assert [m for m in MODALITIES if f"{m}/rewards/accuracies" in row] in ([m] for m in MODALITIES)
    assert {m for row in steps for m in MODALITIES if f"{m}/rewards/accuracies" in row} == set(MODALITIES)
    assert steps[-1]["loss"] < steps[0]["loss"]
    out = capsys.readouterr().out
    assert "pref acc" in out and "preference accuracy: first 5 steps" in out
    assert (run / "checkpoints" / "step_000020" / "adapter").is_dir()


@pytest.mark.slow
def test_reference_log_probs_are_computed_once_per_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from omni_trainer.engines.local.trainer import LocalTrainer
    from omni_training.actor import Actor

    rows_scored: list[int] = []
    original = Actor.compute_log_probs

    def counting(self: Actor, batches: Any, *, reference: bool = False) -> Any:
        if reference:
            rows_scored.extend([int(b.responses.shape[0]) for b in batches])
        return original(self, batches, reference=reference)

    monkeypatch.setattr(Actor, "compute_log_probs", counting)
    trainer = LocalTrainer(resolve_run(load_config([
        "algorithm.sample_source=offline", "data.builtin_task_size=12", "data.train_batch_size=4",
        "trainer.total_training_steps=9", "trainer.val_before_train=false", "trainer.test_freq=0",
        f"trainer.default_local_dir={tmp_path / 'run'}",
    ])))
    trainer.setup()
    seen: set[int] = set()
    for step, batch in trainer.batches(0):
        trainer.train_step(step, batch)
        seen.update(pair.key for pair in batch)
    assert 3 <= len(seen) <= 12  # sampled with replacement: pairs repeat across steps
    assert sum(rows_scored) == 2 * len(seen)  # a chosen and a rejected row per distinct pair, once
    assert set(trainer.task.reference) == seen  # type: ignore[attr-defined]


def preference_file(tmp_path: Path) -> Path:
    from PIL import Image

    from omni_data import preference_row, write_preference_parquet

    picture = tmp_path / "red.png"
    Image.new("RGB", (32, 32), (200, 0, 0)).save(picture)
    question = [{"role": "user", "content": "<image>What colour is this?"}]

    def row(index: int, chosen: str, rejected: str, image: str = str(picture), words: int = 0) -> dict[str, Any]:
        asked = [{"role": "user", "content": question[0]["content"] + " colour" * words}]
        return preference_row(data_source="omni_preference/image", messages=asked, chosen=chosen,
                              rejected=rejected, modality="image", extra_info={"index": index}, images=[image])

    rows = [row(i, "Red.", "Blue.") for i in range(4)]
    rows += [row(4, "Red.", "Red."), row(5, "  ", "Blue."), row(6, "Red.", "Blue.", image=str(tmp_path / "gone.png"))]
    rows += [row(7, "Red.", "Blue.", words=1100)]  # over data.max_prompt_length (1024 tokens)
    return write_preference_parquet(rows, tmp_path / "pairs.parquet")


@pytest.mark.slow
def test_bad_pairs_are_counted_and_a_users_file_trains(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    pairs = preference_file(tmp_path)
    run = tmp_path / "run"
    assert main([
        "algorithm.sample_source=offline", "algorithm.trainer_type=direct_preference",
        "algorithm.paired_preference=true", f"actor_rollout_ref.model.path={build_tiny_qwen3_omni()}",
        f"data.train_files=[{pairs}]", f"data.val_files=[{pairs}]", "data.on_bad_row=skip", "data.train_batch_size=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        "trainer.total_training_steps=2", f"trainer.default_local_dir={run}",
        "actor_rollout_ref.actor.omni_loss.loss_type=simpo", "actor_rollout_ref.actor.omni_loss.average_log_prob=true",
        "+data.train_sampler.sampler_kwargs={batch_size:2,drop_last:true,modality_sample_weights:{image:1.0}}",
    ]) == 0
    out = capsys.readouterr().out
    assert "dropped rows (left out of the train files at load): 4" in out
    # with each reason, as an RL run gives them: it gave the count alone
    assert "preference dataset: read 8 rows, kept 4, dropped 4 (" in out and "overlong_prompt=1" in out
    rows = metrics_of(run)
    assert [row["step"] for row in rows] == [0, 1, 2]
    assert rows[0]["val/num_samples"] == 4 and rows[-1]["data/dropped_rows"] == 4
    assert "val/num_samples: 4.000" in out  # the final validation, in the summary
    assert "rewards/accuracies" in rows[-1] and "image/rewards/accuracies" in rows[-1]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["trainer.engine=verl", "trainer.device=cpu", "trainer.n_gpus_per_node=3"],
         "ppo_mini_batch_size=8 pairs do not split evenly over the 3 ranks"),
        (["trainer.engine=verl", "trainer.device=cpu", "trainer.n_gpus_per_node=2",
          "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"], "ppo_micro_batch_size_per_gpu=3 pairs do not divide the 4"),
        (["trainer.engine=verl", "data.train_batch_size=12"], "data.train_batch_size=12 is not a multiple"),
        (["actor_rollout_ref.actor.ppo_epochs=2"], "passes over its pairs once"),
        (["data.truncation=middle"], "data.truncation=middle"),
        (["actor_rollout_ref.actor.omni_loss.loss_type=kto"], "loss_type='kto'"),
        (["actor_rollout_ref.actor.omni_loss.beta=0"], "beta=0.0 must be positive"),
        (["actor_rollout_ref.actor.omni_loss.label_smoothing=0.5"], "must be in [0, 0.5)"),
        (["algorithm.paired_preference=false"], "offline preference rows are always pairs"),
        (["algorithm.trainer_type=policy_gradient"], "set algorithm.trainer_type=direct_preference"),
        (["+data.train_sampler.class_name=RandomSampler"], "ModalityGroupedBatchSampler"),
        (["+data.train_sampler.sampler_kwargs={replacement:false}"], "training pairs are drawn with replacement"),
        (["+data.train_sampler.sampler_kwargs={batch_size:4}"], "differs from data.train_batch_size=8"),
    ],
)
def test_what_an_offline_run_cannot_honour_is_refused_by_name(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        preflight(resolve_run(load_config(["algorithm.sample_source=offline", *overrides])))
    assert message in str(info.value)


def test_preference_keys_without_an_offline_run_are_refused() -> None:
    with pytest.raises(ConfigError, match="need algorithm.sample_source=offline"):
        preflight(resolve_run(load_config(["algorithm.paired_preference=true"])))


def test_verl_omnis_hydra_dicts_are_read_as_hydra_reads_them() -> None:
    config = load_config([
        "+data.train_sampler.sampler_kwargs={batch_size:32,drop_last:true,num_batches:200,"
        "modality_sample_weights:{image:1.0,video:1.0,audio:0.5}}",
        "+data.train_sampler.class_path=pkg://verl_omni.utils.dataset.offline_mllm_dpo_dataset",
    ])
    assert config.data.train_sampler.sampler_kwargs == {
        "batch_size": 32, "drop_last": True, "num_batches": 200,
        "modality_sample_weights": {"image": 1.0, "video": 1.0, "audio": 0.5},
    }
    assert config.data.train_sampler.class_path == "pkg://verl_omni.utils.dataset.offline_mllm_dpo_dataset"


class WordTokenizer:
    """One token a character: answer lengths are what the test writes."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) for c in text]}


class OnePairDataset:
    """What :class:`PairSource` reads of omni-data's ``PreferenceDataset``: one encoded pair."""

    modalities = ["text"]

    class report:
        dropped: dict[str, int] = {}

    def __len__(self) -> int:
        return 1

    def __getitem__(self, item: int) -> dict[str, Any]:
        import torch

        return {"input_ids": torch.tensor([1, 2]), "attention_mask": torch.tensor([1, 1]), "multi_modal_inputs": {},
                "data_source": "pairs", "index": 7, "extra_info": {}, "modality": "text",
                "chosen": "abcdefghij", "rejected": "xyz"}


@pytest.mark.parametrize(("truncation", "chosen"), [(None, "abcd"), ("right", "abcd"), ("left", "ghij")])
def test_a_long_answer_is_cut_to_max_response_length_and_counted(
    truncation: str | None, chosen: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from omni_trainer.preference_pairs import PairSource

    overrides = ["algorithm.sample_source=offline", "data.max_response_length=4"]
    config = load_config([*overrides, *([f"data.truncation={truncation}"] if truncation else [])])
    pairs = PairSource(OnePairDataset(), WordTokenizer(), config=config)
    pair = pairs[0]
    assert pair.chosen == [ord(c) for c in chosen] and pair.rejected == [ord(c) for c in "xyz"]  # a short one is kept
    assert pairs.truncated == 1
    out = capsys.readouterr().out
    assert "preference row 7 (text): its chosen answer has 10 tokens" in out and "data.max_response_length=4" in out


def test_a_long_answer_is_refused_by_row_with_truncation_error() -> None:
    from omni_trainer.preference_pairs import PairSource

    config = load_config(["algorithm.sample_source=offline", "data.max_response_length=4", "data.truncation=error"])
    with pytest.raises(ValueError, match=r"preference row 7 \(text\): its chosen answer has 10 tokens, more than"):
        PairSource(OnePairDataset(), WordTokenizer(), config=config)[0]


@pytest.mark.parametrize("truncation", ["left", "right", "error"])
def test_an_offline_run_takes_data_truncation_on_either_engine(truncation: str) -> None:
    from omni_trainer.engines.local.verl_keys import local_refusals

    config = load_config(["algorithm.sample_source=offline", f"data.truncation={truncation}"])
    assert local_refusals(config) == []
    rl = load_config([f"data.truncation={truncation}"])
    assert bool(local_refusals(rl)) == (truncation != "error")  # an RL run's prompts: verl's key
