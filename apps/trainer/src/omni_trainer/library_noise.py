"""Library messages we understand to be noise, silenced here and nowhere else.

Each silencer matches one message of one logger (or warning of one module) exactly, says why
it is noise, and has a canary test that fails when the library stops saying it (then the
silencer goes). Everything else a library says is still shown. :func:`silence_known_noise`
installs them in this process; the CLI calls it first (verl's worker processes do not call it).
"""

from __future__ import annotations

import ast
import logging
import re

ROPE_LOGGER = "transformers.modeling_rope_utils"
TALKER_MROPE_KEYS = frozenset({"mrope_section", "interleaved", "mrope_interleaved"})
"""The multimodal-RoPE keys of Qwen3-Omni's ``talker_config.text_config.rope_parameters``."""
_UNRECOGNIZED_ROPE_KEYS = re.compile(r"Unrecognized keys in `rope_parameters` for 'rope_type'='default': (\{.*\})")


class TalkerMropeKeysFilter(logging.Filter):
    """Drops transformers' ``Unrecognized keys in `rope_parameters` for 'rope_type'='default':
    {...}`` when every key named is a multimodal-RoPE key.

    Why it is noise: transformers 5.10's ``Qwen3OmniMoeTalkerTextConfig`` does not list these
    keys in ``ignore_keys_at_rope_validation`` (the thinker's ``Qwen3OmniMoeTextConfig`` does),
    yet the talker's rotary embedding reads them (``Qwen3OmniMoeTalkerRotaryEmbedding``
    subclasses the thinker's, which takes ``mrope_section``). Every load of a Qwen3-Omni
    config (tiny or real) printed it, five times at a local run's start-up. An unrecognised
    key outside that set is still reported.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        match = _UNRECOGNIZED_ROPE_KEYS.fullmatch(record.getMessage())
        if match is None:
            return True
        try:
            keys = ast.literal_eval(match.group(1))
        except (ValueError, SyntaxError):
            return True
        return not (isinstance(keys, set) and keys <= TALKER_MROPE_KEYS)


def silence_known_noise() -> None:
    """Install every silencer of this module (idempotent; cheap: imports no library)."""
    logger = logging.getLogger(ROPE_LOGGER)
    if not any(isinstance(existing, TalkerMropeKeysFilter) for existing in logger.filters):
        logger.addFilter(TalkerMropeKeysFilter())
