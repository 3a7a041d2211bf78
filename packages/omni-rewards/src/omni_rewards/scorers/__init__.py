"""The built-in scorers; importing this package registers them in ``SCORERS``."""

from omni_rewards.scorers import audio_mcq, builtin_digits, geometry3k, omnivideo_qi  # noqa: F401  (register their data sources)
from omni_rewards.scorers.choice import score_choice
from omni_rewards.scorers.gsm8k import GSM8K_METHODS, extract_gsm8k_answer, score_gsm8k
from omni_rewards.scorers.math import score_math
from omni_rewards.scorers.mmk12 import DEFAULT_FORMAT_SCORE, score_mmk12

__all__ = [
    "DEFAULT_FORMAT_SCORE",
    "GSM8K_METHODS",
    "extract_gsm8k_answer",
    "score_choice",
    "score_gsm8k",
    "score_math",
    "score_mmk12",
]
