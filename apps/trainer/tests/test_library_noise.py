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
