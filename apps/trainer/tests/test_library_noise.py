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


PROBE = """
import json, warnings
from omegaconf import OmegaConf
with warnings.catch_warnings(record=True) as loud:
    warnings.simplefilter("always")
    import verl.workers.engine
    from verl.trainer.ppo.utils import need_critic
    need_critic(OmegaConf.create({"critic": {"enable": None}, "algorithm": {"adv_estimator": "grpo"}}))
from omni_trainer.library_noise import silence_known_noise
silence_known_noise()
with warnings.catch_warnings(record=True) as quiet:
    warnings.simplefilter("always", append=True)  # after the silencers: what they do not drop shows
    for w in loud:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, module="verl.workers.engine"
                               if w.filename.endswith("engine/__init__.py") else None)
    warnings.warn_explicit(UserWarning("fsdp engine is not available: something else"), UserWarning, "x.py", 1,
                           module="verl.workers.engine")
print(json.dumps({"loud": [str(w.message) for w in loud], "quiet": [str(w.message) for w in quiet]}))
"""


def test_verl_still_warns_about_each_engine_we_do_not_install_and_the_silencer_drops_exactly_those() -> None:
    """Canary for the ``UNUSED_VERL_ENGINES`` and ``VERL_CRITIC_NOTE`` filters: a fresh process
    importing verl's engine package warns for each unused engine, and verl's ``need_critic``
    notes the disabled critic; with :func:`silence_known_noise` those (and nothing else) go."""
    import json
    import subprocess
    import sys

    from omni_trainer.library_noise import UNUSED_VERL_ENGINES, VERL_CRITIC_NOTE

    pytest.importorskip("verl", reason="needs the distributed extra")
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, check=True)
    said = json.loads(done.stdout.strip().splitlines()[-1])
    for name in UNUSED_VERL_ENGINES:
        assert any(m.startswith(f"{name} engine is not available: ModuleNotFoundError") for m in said["loud"]), (
            f"verl no longer warns about {name}: drop it from UNUSED_VERL_ENGINES")
    assert any(VERL_CRITIC_NOTE in m for m in said["loud"]), "verl no longer notes the disabled critic: drop VERL_CRITIC_NOTE"
    assert not any("engine is not available: ModuleNotFoundError" in m or VERL_CRITIC_NOTE in m for m in said["quiet"])
    assert "fsdp engine is not available: something else" in said["quiet"]  # another warning still shows


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
