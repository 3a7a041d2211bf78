from __future__ import annotations

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


def test_verl_engine_is_refused_plainly(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trainer.engine=verl"]) == 2
    assert "trainer.engine=verl is not available yet" in capsys.readouterr().err


def test_subcommands_dispatch(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "torch" in out and "extra distributed (verl + ray)" in out
    for name in ("convert", "tiny", "plan-memory", "merge"):
        with pytest.raises(SystemExit) as info:
            main([name, "--help"])
        assert info.value.code == 0
