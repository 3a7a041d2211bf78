"""The built-in speech task of ``stage=talker``: say a short phrase, as long as it takes.

Each prompt asks the model to say a one-word phrase; the assistant turn holds that phrase,
which the talker speaks. The reward (``reward.audio_rewards`` in ``embedded_talker.yaml``)
is the signal-level ``duration`` reward of ``omni_rewards.audio``: 1 when the speech lasts about as long as the phrase takes to say
(2.5 words a second), falling off on either side. From random weights the talker ends its
speech at random (most samples run long), so the reward starts low and rises as the policy
learns when to stop: a curve a laptop CPU shows in minutes.

This module stays light (no torch at import).
"""

from __future__ import annotations

import random
from typing import Any

DATA_SOURCE = "omni_rl/builtin_speech"
PHRASES = ("Hi.", "Yes.", "Thanks.", "Okay.", "Hello.", "Sure.", "Right.", "Great.")


def speech_rows(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` task rows: the chat messages, the phrase to speak, the reward fields."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        phrase = rng.choice(PHRASES)
        rows.append({
            "messages": [{"role": "user", "content": [{"type": "text", "text": f"Say: {phrase}"}]}],
            "spoken_text": phrase,
            "data_source": DATA_SOURCE,
            "ground_truth": phrase,
            "index": index,
        })
    return rows
