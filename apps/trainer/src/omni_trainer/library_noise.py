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
import warnings

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


VERL_ENGINE_MODULE = "verl.workers.engine"
UNUSED_VERL_ENGINES = ("torchtitan", "veomni", "automodel", "mindspeed", "megatron")
"""verl's training backends we neither use nor install. Why their warnings are noise: importing
``verl.workers.engine`` tries each backend verl knows and warns ``<name> engine is not
available: ModuleNotFoundError(...)`` for each missing one; omni-rl trains with verl's FSDP
engine only. Printed once per process: 5 lines in the ``trainer`` process, and again in each
of verl's Ray processes (48 lines of a 3-step CPU run)."""
VERL_CRITIC_NOTE = "Disabled critic as algorithm.adv_estimator != gae"
"""verl's ``need_critic`` warns it for every estimator but GAE. Why it is noise: omni-rl's
estimators (GRPO, GSPO's, RLOO, ...) have no critic; nothing was disabled that was asked for."""
VERL_PLATFORM_LOGGER = "verl.plugin.platform.platform_manager"
CPU_PLATFORM_MESSAGES = (
    re.compile(r"No supported accelerator detected\. Registered: .*\. Falling back to 'nvidia'\."),
    re.compile(r"Platform 'nvidia' \(PlatformCUDA\) is registered but not available\..*"),
    re.compile(r"Replacing already-initialised platform 'cuda' with 'cpu'"),
)


class CpuPlatformFilter(logging.Filter):
    """Drops verl's platform manager's three warnings of a ``trainer.device=cpu`` run: no GPU
    found, CUDA registered but unavailable, and the CUDA platform replaced by our CPU one.

    Why it is noise there: the run asked for the CPU, and our CPU platform
    (``omni_verl_cpu.platform``) is installed over the default right after.
    Installed for CPU runs only: on a GPU machine the first two mean a GPU is missing."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(pattern.fullmatch(message) for pattern in CPU_PLATFORM_MESSAGES)


def silence_known_noise() -> None:
    """Install every silencer of this module that holds for any run (idempotent; cheap:
    imports no library)."""
    logger = logging.getLogger(ROPE_LOGGER)
    if not any(isinstance(existing, TalkerMropeKeysFilter) for existing in logger.filters):
        logger.addFilter(TalkerMropeKeysFilter())
    for name in UNUSED_VERL_ENGINES:
        warnings.filterwarnings("ignore", message=re.escape(f"{name} engine is not available: ModuleNotFoundError"),
                                category=UserWarning, module=re.escape(VERL_ENGINE_MODULE))
    warnings.filterwarnings("ignore", message=re.escape(VERL_CRITIC_NOTE), category=UserWarning)


def silence_cpu_platform_noise() -> None:
    """Install :class:`CpuPlatformFilter` (a ``trainer.device=cpu`` verl run; idempotent)."""
    logger = logging.getLogger(VERL_PLATFORM_LOGGER)
    if not any(isinstance(existing, CpuPlatformFilter) for existing in logger.filters):
        logger.addFilter(CpuPlatformFilter())
