"""Silenced library noise: each silencer drops exactly its message, and a canary per silencer
fails when the library stops saying it (then the silencer goes)."""

from __future__ import annotations

import logging

import pytest

from omni_trainer.library_noise import ROPE_LOGGER, TALKER_MROPE_KEYS, TalkerMropeKeysFilter, silence_known_noise


def record(message: str) -> logging.LogRecord:
    return logging.LogRecord(ROPE_LOGGER, logging.WARNING, __file__, 1, message, None, None)


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_transformers_still_calls_the_talkers_mrope_keys_unrecognized(monkeypatch: pytest.MonkeyPatch) -> None:
    """Canary: transformers 5.10's talker text config does not ignore the multimodal-RoPE keys
    its rotary embedding reads; when this fails, transformers fixed it: drop the silencer."""
    from transformers.models.qwen3_omni_moe import configuration_qwen3_omni_moe as configs
    from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as modeling

    assert TALKER_MROPE_KEYS <= set(configs.Qwen3OmniMoeTextConfig.ignore_keys_at_rope_validation)  # the thinker's
    assert issubclass(modeling.Qwen3OmniMoeTalkerRotaryEmbedding, modeling.Qwen3OmniMoeThinkerTextRotaryEmbedding)
    logger = logging.getLogger(ROPE_LOGGER)
    monkeypatch.setattr(logger, "filters", [])  # what transformers says, before any silencer
    capture = Capture()
    logger.addHandler(capture)
    try:
        configs.Qwen3OmniMoeTalkerTextConfig(
            rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [4, 2, 2],
                             "interleaved": True, "mrope_interleaved": True}
        )
    finally:
        logger.removeHandler(capture)
    said = [r for r in capture.records if "Unrecognized keys in `rope_parameters`" in r.getMessage()]
    assert said, "transformers no longer warns about the talker's mrope keys: remove TalkerMropeKeysFilter"
    assert not any(TalkerMropeKeysFilter().filter(r) for r in said)  # the silencer matches its exact text


def test_only_the_mrope_keys_message_is_dropped() -> None:
    keep = TalkerMropeKeysFilter().filter
    assert not keep(record("Unrecognized keys in `rope_parameters` for 'rope_type'='default': {'mrope_section'}"))
    assert keep(record("Unrecognized keys in `rope_parameters` for 'rope_type'='default': {'mrope_section', 'factor'}"))
    assert keep(record("Unrecognized keys in `rope_parameters` for 'rope_type'='yarn': {'mrope_section'}"))
    assert keep(record("`rope_parameters`'s factor field must be a float >= 1, got 0.5"))


def test_silencing_twice_installs_one_filter() -> None:
    silence_known_noise()
    silence_known_noise()
    filters = logging.getLogger(ROPE_LOGGER).filters
    assert sum(isinstance(f, TalkerMropeKeysFilter) for f in filters) == 1


def run_python(code: str) -> str:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return done.stderr


def test_verl_still_warns_about_each_engine_we_do_not_install_and_the_silencer_drops_exactly_those() -> None:
    """Canary for the ``UNUSED_VERL_ENGINES`` filter: a plain import of verl's engine package
    warns for each; with :func:`silence_known_noise` none of them (and nothing else) is dropped."""
    from omni_trainer.library_noise import UNUSED_VERL_ENGINES, VERL_CRITIC_NOTE

    pytest.importorskip("verl", reason="needs the distributed extra")
    said = run_python("import verl.workers.engine")
    for name in UNUSED_VERL_ENGINES:
        assert f"UserWarning: {name} engine is not available: ModuleNotFoundError" in said, (
            f"verl no longer warns about {name}: drop it from UNUSED_VERL_ENGINES")
    quiet = run_python(
        "from omni_trainer.library_noise import silence_known_noise; silence_known_noise(); import warnings; "
        "import verl.workers.engine; warnings.warn('fsdp engine is not available: something else'); "
        "from verl.trainer.ppo.utils import need_critic; from omegaconf import OmegaConf; "
        "need_critic(OmegaConf.create({'critic': {'enable': None}, 'algorithm': {'adv_estimator': 'grpo'}}))"
    )
    assert "engine is not available: ModuleNotFoundError" not in quiet and VERL_CRITIC_NOTE not in quiet
    assert "fsdp engine is not available: something else" in quiet  # another warning still shows
    loud = run_python(
        "from verl.trainer.ppo.utils import need_critic; from omegaconf import OmegaConf; "
        "need_critic(OmegaConf.create({'critic': {'enable': None}, 'algorithm': {'adv_estimator': 'grpo'}}))"
    )
    assert VERL_CRITIC_NOTE in loud, "verl no longer warns that the critic is disabled: drop VERL_CRITIC_NOTE"


def test_a_cpu_runs_platform_warnings_are_dropped_and_only_those() -> None:
    """Canary: verl's platform manager still says the three messages, word for word."""
    from pathlib import Path

    from omni_trainer.library_noise import CPU_PLATFORM_MESSAGES, VERL_PLATFORM_LOGGER, CpuPlatformFilter

    pytest.importorskip("verl", reason="needs the distributed extra")
    import verl.plugin.platform.platform_manager as manager

    source = Path(manager.__file__).read_text()
    for text in ("No supported accelerator detected. Registered: %s. Falling back to 'nvidia'.",
                 "Platform '%s' (%s) is registered but not available. ",
                 "Replacing already-initialised platform '%s' with '%s'"):
        assert text in source, f"verl's platform manager no longer says {text!r}: update CPU_PLATFORM_MESSAGES"
    keep = CpuPlatformFilter().filter

    def said(message: str) -> logging.LogRecord:
        return logging.LogRecord(VERL_PLATFORM_LOGGER, logging.WARNING, __file__, 1, message, None, None)

    assert not keep(said("No supported accelerator detected. Registered: ('nvidia', 'cpu'). Falling back to 'nvidia'."))
    assert not keep(said("Replacing already-initialised platform 'cuda' with 'cpu'"))
    assert not keep(said("Platform 'nvidia' (PlatformCUDA) is registered but not available. This may be due to this "
                         "ray actor being a CPU-only actor."))
    assert keep(said("Replacing already-initialised platform 'cuda' with 'npu'"))
    assert len(CPU_PLATFORM_MESSAGES) == 3
