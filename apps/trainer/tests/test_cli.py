from __future__ import annotations

import pytest

from omni_trainer.cli import main


def test_help_says_what_is_coming(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: trainer" in out
    assert "Neither engine exists yet" in out
    assert "actor_rollout_ref.actor.policy_loss.loss_mode=gspo" in out


@pytest.mark.parametrize("argv", [[], ["trainer.total_epochs=1"]])
def test_training_is_refused_plainly(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no fake training output
    assert "training is not available yet" in captured.err
    assert "Nothing was trained" in captured.err
