"""The model directory before anything loads (tokenizer, chat template, weights: exit 2 naming
the file), the loaded tokenizer, and the model recognised by content when a run resumes."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from omni_trainer.cli import main
from omni_trainer.config import ConfigError, load_config
from omni_contracts import require_usable_tokenizer
from omni_trainer.model_folder import folder_problems, model_fingerprint, same_model
from omni_trainer.preflight import preflight
from omni_trainer.resolved import resolve_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_folders import minimal_checkpoint, write_tokenizer  # noqa: E402

KEY = "actor_rollout_ref.model.path"


def problems_of(model: Path) -> list[str]:
    return folder_problems(KEY, str(model))


def test_a_complete_folder_has_no_problems(tmp_path: Path) -> None:
    assert problems_of(minimal_checkpoint(tmp_path / "m")) == []


def test_missing_tokenizer_exits_2_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Today transformers builds a tokenizer of the special tokens alone: every prompt encodes
    # as nothing, and the run trained and exited 0.
    model = minimal_checkpoint(tmp_path / "m")
    (model / "tokenizer.json").unlink()
    assert main(["--print-config", f"{KEY}={model}"]) == 2
    err = capsys.readouterr().err
    assert f"{KEY}={model}: has no tokenizer.json (nor vocab.json with merges.txt" in err
    assert "encodes every prompt as nothing. Copy the model's tokenizer files" in err
    assert "Traceback" not in err


def test_other_tokenizer_files_are_enough(tmp_path: Path) -> None:
    model = minimal_checkpoint(tmp_path / "m")
    (model / "tokenizer.json").unlink()
    (model / "vocab.json").write_text("{}")
    assert any("has no tokenizer.json" in p for p in problems_of(model))  # vocab.json alone is no tokenizer...
    (model / "merges.txt").write_text("#version: 0.2\n")
    assert problems_of(model) == []  # ...with merges.txt it is (transformers builds the fast one from them)
    (model / "vocab.json").unlink()
    (model / "merges.txt").unlink()
    (model / "qwen.tiktoken").write_text("")
    assert problems_of(model) == []


def test_a_saved_tokenizer_without_vocabulary_is_refused(tmp_path: Path) -> None:
    model = minimal_checkpoint(tmp_path / "m")
    write_tokenizer(model, vocab={})
    assert problems_of(model) == [
        f"{KEY}={model}: tokenizer.json has an empty vocabulary (only its 10 added tokens), so every prompt encodes "
        "as nothing; it was saved from a tokenizer loaded without its files. Copy the model's own tokenizer.json "
        "into the directory"
    ]


def test_missing_chat_template_is_refused_and_each_source_is_enough(tmp_path: Path) -> None:
    model = minimal_checkpoint(tmp_path / "m")
    (model / "chat_template.jinja").unlink()
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": ""}))
    assert problems_of(model) == [
        f"{KEY}={model}: has no chat template: tokenizer_config.json has no 'chat_template', and there is no "
        "(non-empty) chat_template.json or chat_template.jinja. Every prompt is templated as a chat; copy the "
        "model's chat_template.json (or .jinja) into the directory"
    ]
    (model / "chat_template.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    assert problems_of(model) == []
    (model / "chat_template.json").unlink()
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    assert problems_of(model) == []


def test_missing_weights_are_refused(tmp_path: Path) -> None:
    model = minimal_checkpoint(tmp_path / "m")
    (model / "model.safetensors").rename(model / "model-00001-of-00002.safetensors")
    (problem,) = problems_of(model)
    assert problem.startswith(f"{KEY}={model}: has no weights (model-00001-of-00002.safetensors without their "
                              "model.safetensors.index.json): transformers loads model.safetensors")


def test_truncated_safetensors_exit_2_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = minimal_checkpoint(tmp_path / "m")
    save_file({"a": np.zeros(100, np.float32), "b": np.ones(50, np.float32)}, str(model / "model.safetensors"))
    whole = (model / "model.safetensors").read_bytes()
    (model / "model.safetensors").write_bytes(whole[:-10])  # an interrupted download
    assert main(["--print-config", f"{KEY}={model}"]) == 2
    err = capsys.readouterr().err
    assert (f"model.safetensors is truncated: its header promises {len(whole):,} bytes, the file has "
            f"{len(whole) - 10:,}; download it again") in err
    assert "Traceback" not in err
    (model / "model.safetensors").write_bytes(whole[:5])
    assert "model.safetensors is truncated: 5 bytes, shorter than a safetensors header" in problems_of(model)[0]
    (model / "model.safetensors").write_bytes(whole + b"\0")
    assert "model.safetensors is damaged: it has 1 bytes past its last tensor" in problems_of(model)[0]


def test_an_index_naming_missing_or_truncated_shards_is_refused(tmp_path: Path) -> None:
    model = minimal_checkpoint(tmp_path / "m")
    (model / "model.safetensors").unlink()
    shards = [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    for index, name in enumerate(shards[:2]):
        save_file({f"w{index}": np.zeros(8, np.float32)}, str(model / name))
    (model / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {f"w{index}": name for index, name in enumerate(shards)}}))
    truncated = model / shards[1]
    truncated.write_bytes(truncated.read_bytes()[:-4])
    assert problems_of(model) == [
        f"{KEY}={model}: model.safetensors.index.json names 1 weight file(s) that are not in the directory "
        f"({shards[2]}); download them (an interrupted download or copy?)",
        f"{KEY}={model}: {shards[1]} is truncated: its header promises {truncated.stat().st_size + 4:,} bytes, "
        f"the file has {truncated.stat().st_size:,}; download it again (an interrupted download or copy?)",
    ]


def test_a_truncated_torch_bin_is_refused(tmp_path: Path) -> None:
    import torch

    model = minimal_checkpoint(tmp_path / "m")
    (model / "model.safetensors").unlink()
    torch.save({"w": torch.zeros(64)}, model / "pytorch_model.bin")
    assert problems_of(model) == []
    whole = (model / "pytorch_model.bin").read_bytes()
    (model / "pytorch_model.bin").write_bytes(whole[: len(whole) // 2])
    assert problems_of(model) == [
        f"{KEY}={model}: pytorch_model.bin is truncated: the zip archive torch.save writes lacks its end; "
        "download it again (an interrupted download or copy?)"
    ]


def test_every_folder_problem_is_reported_with_the_others(tmp_path: Path) -> None:
    model = minimal_checkpoint(tmp_path / "m")
    for name in ("tokenizer.json", "chat_template.jinja", "model.safetensors"):
        (model / name).unlink()
    with pytest.raises(ConfigError) as info:
        preflight(resolve_run(load_config([f"{KEY}={model}"])))
    found = "\n".join(info.value.problems)
    for expected in ("has no tokenizer.json", "has no chat template", "has no weights"):
        assert expected in found, expected


def test_the_fallback_tokenizer_transformers_builds_is_refused_once_loaded(tmp_path: Path) -> None:
    """A folder with tokenizer_config.json but no vocabulary: transformers loads a tokenizer of
    its special tokens alone (10 here), which encodes any text as []."""
    from omni_contracts import CheckpointError, OmniContractError
    from transformers import AutoTokenizer

    model = tmp_path / "m"
    model.mkdir()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    (model / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "added_tokens_decoder": {str(i): {"content": t, "special": True} for i, t in enumerate(special)},
    }))
    fallback = AutoTokenizer.from_pretrained(model)
    assert fallback.encode("The quick brown fox", add_special_tokens=False) == []  # what the guard is for
    with pytest.raises(CheckpointError, match=rf"The tokenizer loaded from {model} encodes .* as \[\]") as info:
        require_usable_tokenizer(fallback, str(model))
    assert isinstance(info.value, OmniContractError)  # a user error: the trainer exits 2
    assert "Copy the model's tokenizer.json (or vocab.json and merges.txt) into it" in str(info.value)

    from omni_qwen3.tiny.tokenizer import train_tokenizer

    require_usable_tokenizer(train_tokenizer(512), "tiny")  # a tokenizer with its vocabulary passes


# --- the model by content ------------------------------------------------------------------------


def test_a_copy_and_a_symlink_have_the_models_fingerprint_and_a_changed_tensor_does_not(tmp_path: Path) -> None:
    model = minimal_checkpoint(tmp_path / "m")
    save_file({"a": np.arange(1000, dtype=np.float32), "b": np.ones(10, np.float32)}, str(model / "model.safetensors"))
    copy = Path(shutil.copytree(model, tmp_path / "copy"))
    link = tmp_path / "link"
    link.symlink_to(model, target_is_directory=True)
    digest = model_fingerprint(model)
    assert digest is not None and model_fingerprint(copy) == digest and model_fingerprint(link) == digest
    assert model_fingerprint(tmp_path / "nothing") is None

    # A fine-tune of the same shape: same names, dtypes and offsets; other values.
    save_file({"a": np.arange(1000, dtype=np.float32) * 1.01, "b": np.ones(10, np.float32)},
              str(copy / "model.safetensors"))
    assert model_fingerprint(copy) != digest
    shutil.copy(model / "model.safetensors", copy / "model.safetensors")
    assert model_fingerprint(copy) == digest
    (copy / "config.json").write_text(json.dumps({"architectures": ["Other"]}))
    assert model_fingerprint(copy) != digest


def test_same_model_by_content_and_for_checkpoints_saved_before_fingerprints(tmp_path: Path) -> None:
    model = minimal_checkpoint(tmp_path / "m")
    other = minimal_checkpoint(tmp_path / "other")
    save_file({"w": np.ones(4, np.float32)}, str(other / "model.safetensors"))
    here = {"path": "/copy/of/m", "model": model_fingerprint(model)}
    assert same_model({"path": str(model), "model": model_fingerprint(model)}, here)
    assert not same_model({"path": str(model), "model": model_fingerprint(other)}, here)
    # Recorded before fingerprints: the path, or what is at that path now.
    assert same_model({"path": str(model)}, here)
    assert not same_model({"path": str(other)}, here)
    assert not same_model({"path": str(tmp_path / "gone")}, here)
    assert same_model({"path": None, "model": None}, {"path": None, "model": None})  # the embedded default


def test_the_derived_run_name_counts_the_model_by_content(tmp_path: Path) -> None:
    """A run restarted through a symlink or a copy of its model finds its run directory."""
    model = minimal_checkpoint(tmp_path / "models" / "m")
    link = tmp_path / "links" / "m"
    link.parent.mkdir()
    link.symlink_to(model, target_is_directory=True)
    copy = Path(shutil.copytree(model, tmp_path / "copies" / "m"))
    other = Path(shutil.copytree(model, tmp_path / "others" / "m"))
    save_file({"w": np.full(4, 2.0, np.float32)}, str(other / "model.safetensors"))  # same shapes, other values

    def run_dir(path: Path | str) -> str:
        return load_config([f"{KEY}={path}", "data.train_files=/d/gsm8k/train.parquet"]).trainer.default_local_dir

    name = run_dir(model)
    assert name.startswith("runs/m-gsm8k-train-")
    assert run_dir(link) == name and run_dir(copy) == name  # today: three directories
    assert run_dir(other) != name
    # No model folder there (a typo, a hub id): the resolved path, so a symlinked parent counts once.
    (tmp_path / "alias").symlink_to(tmp_path / "models", target_is_directory=True)
    assert run_dir(tmp_path / "alias" / "absent") == run_dir(tmp_path / "models" / "absent") != name


def run_with(model: Path, run: Path) -> list[str]:
    return [f"{KEY}={model}", f"trainer.default_local_dir={run}"]


def test_a_run_resumes_through_a_copy_or_a_symlink_of_its_model_and_refuses_another(tmp_path: Path) -> None:
    from omni_trainer.run_dir import prepare_run_dir, run_identity

    model = minimal_checkpoint(tmp_path / "models" / "m")
    run = tmp_path / "run"
    step = run / "checkpoints" / "step_000003"
    (step / "adapter").mkdir(parents=True)
    save_file({"lora_A": np.zeros((4, 8), np.float32)}, str(step / "adapter" / "adapter_model.safetensors"))
    import torch

    torch.save({"optimizer": {}, "scheduler": {}}, step / "optim.pt")
    torch.save({"torch": torch.get_rng_state()}, step / "rng.pt")
    identity = run_identity(load_config(run_with(model, run)))
    (step / "state.json").write_text(json.dumps({"step": 3, "state": {"identity": identity}}))

    link = tmp_path / "link"
    link.symlink_to(model, target_is_directory=True)
    copy = Path(shutil.copytree(model, tmp_path / "elsewhere" / "copy"))
    for same in (model, link, copy):  # today: refused ("checkpoint '.../m', this run '.../link'")
        assert prepare_run_dir(load_config(run_with(same, run))).start_step == 3, same

    save_file({"w": np.full(4, 2.0, np.float32)}, str(copy / "model.safetensors"))  # another model, same shapes
    with pytest.raises(ConfigError) as info:
        prepare_run_dir(load_config(run_with(copy, run)))
    assert (f"actor_rollout_ref.model.path: checkpoint {str(model)!r}, this run {os.path.abspath(copy)!r} "
            "(compared by content: config.json or weights differ)") in str(info.value)
