"""The step line: what each number says, and why one is missing."""

from __future__ import annotations

from omni_trainer.reporting import step_line, trend_line

STEP = {"critic/score/mean": 0.5, "critic/acc/mean": 0.25, "actor/grad_norm": 0.125, "timing_s/step": 1.5}


def test_the_step_line_shows_pearson_or_why_there_is_none() -> None:
    """It printed ``pearson nan`` for a step whose token probabilities had no variance."""
    measured = {**STEP, "training/rollout_actor_probs_pearson_corr": 0.99951,
                "training/rollout_actor_probs_tokens": 8.0, "rollout_corr/log_ppl_diff": 0.0}
    assert step_line(3, 10, measured) == (
        "step    3/10 | reward 0.500 | acc 0.250 | pearson 0.9995 | grad 0.125 | 1.5 s"
    )
    flat = {**measured, "training/rollout_actor_probs_pearson_corr": float("nan")}
    assert "| pearson n/a (no variance) |" in step_line(3, 10, flat)
    one_token = {**flat, "training/rollout_actor_probs_tokens": 1.0}
    assert "| pearson n/a (<2 tokens) |" in step_line(3, 10, one_token)
    verl_row = {**STEP, "training/rollout_actor_probs_pearson_corr": float("nan")}  # no token count to tell why
    assert "| pearson n/a |" in step_line(3, 10, verl_row)
    assert "nan" not in step_line(3, 10, flat)
    # bypass mode: no old log-prob pass, so no Pearson metric at all
    assert "| pearson n/a (not measured: no separate old log-prob pass, as in rollout-correction bypass mode) |" in (
        step_line(3, 10, STEP))


def test_the_step_line_shows_what_the_optional_features_did() -> None:
    """It hid rollout correction's weights and ESS, skipped updates, distillation's KL and
    staleness under async; each shows only where its metrics are."""
    measured = {**STEP, "training/rollout_actor_probs_pearson_corr": 0.99951}
    assert step_line(3, 10, measured) == "step    3/10 | reward 0.500 | acc 0.250 | pearson 0.9995 | grad 0.125 | 1.5 s"
    features = {**measured, "rollout_corr/rollout_is_mean": 0.98, "rollout_corr/rollout_is_eff_sample_size": 0.91,
                "rollout_corr/rollout_rs_masked_fraction": 0.125, "actor/skipped_step": 0.5, "distill/kl_mean": 0.0312,
                "async/staleness_mean": 1.5, "async/staleness_max": 3.0}
    assert step_line(3, 10, features).endswith(
        "| 1.5 s | IS w 0.980 ESS 0.910 | RS masked 12.5% | skipped 50% of updates | distill KL 0.0312 | staleness 1.5 (max 3)"
    )
    verl_row = {**measured, "actor/grad_norm": float("nan"), "distillation/loss": 0.25}  # verl's names
    assert step_line(3, 10, verl_row).endswith("| update skipped (grad not finite) | distill loss 0.2500")
    # samples whose scorer or judge failed under reward.max_error_rate: scored 0, named in the line
    failed = {**measured, "reward/errors": 3.0, "reward/timeouts": 1.0}
    assert step_line(3, 10, failed).endswith("| 1.5 s | reward failed: 3 errors, 1 timeouts")
    assert step_line(3, 10, {**measured, "reward/errors": 0.0, "reward/timeouts": 0.0}) == step_line(3, 10, measured)


def test_the_summary_trend_names_the_steps_it_averages() -> None:
    """A 3-step run's summary said "first 5 steps ... last 5 steps"."""
    assert trend_line("mean reward", [0.1, 0.25, 0.5]) == "mean reward by step: 0.100, 0.250, 0.500"
    assert trend_line("mean reward", []) == "mean reward: no step recorded one"
    assert trend_line("mean reward", [0.0] * 5 + [1.0] * 5) == "mean reward: first 5 steps 0.000 -> last 5 steps 1.000"
