from __future__ import annotations

from pathlib import Path

import pytest

from omni_trainer.cli import main


def test_help_describes_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: trainer" in out
    assert "the embedded default" in out
    assert "actor_rollout_ref.actor.policy_loss.loss_mode=gspo" in out


def test_verl_engine_explains_what_it_needs(capsys: pytest.CaptureFixture[str]) -> None:
    # The embedded default (built-in task) is local-only; the verl engine says what is missing.
    assert main(["trainer.engine=verl", "actor_rollout_ref.model.path=/m"]) == 2
    err = capsys.readouterr().err
    assert "trainer.engine=verl" in err and ("data.train_files is required" in err or "uv sync --extra" in err)


def test_subcommands_dispatch(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "torch" in out and "extra distributed (verl + ray)" in out
    for name in ("convert", "tiny", "plan-memory", "merge"):
        with pytest.raises(SystemExit) as info:
            main([name, "--help"])
        assert info.value.code == 0
    assert main(["tiny-judge", "--help"]) == 0 and "prints its path" in capsys.readouterr().err
    assert main(["tiny-judge", "extra"]) == 2


def test_convert_never_writes_over_its_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = tmp_path / "gsm8k"
    raw.mkdir()
    (raw / "train.parquet").write_bytes(b"raw data")
    assert main(["convert", "gsm8k", "--input", str(raw), "--output-dir", str(raw)]) == 2
    assert "could overwrite the raw ones" in capsys.readouterr().err
    assert (raw / "train.parquet").read_bytes() == b"raw data"
    assert main(["convert", "gsm8k", "--input", str(raw), "--output-dir", str(raw / "rl")]) == 2
