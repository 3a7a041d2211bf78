"""The built-in task of the embedded default: answer with a number.

Each prompt carries a small generated picture and a synthetic tone (so the image and audio
paths of the model run every step) and asks for a number. With ``data.use_audio_in_video``
each prompt is a short clip instead, whose soundtrack beeps one to three times
(:func:`clip_specs`; the files: :func:`omni_trainer.builtin_files.write_builtin_clips`). The reward is verifiable and
has variance soon after random initialisation, which a tiny model needs to learn from
(``omni_rewards.scorers.builtin_digits``, registered with omni-rewards' built-in scorers).
"""

from __future__ import annotations

import random
from typing import Any

from omni_rewards.scorers.builtin_digits import DATA_SOURCE

QUESTIONS = (
    "How many dots are in the picture?",
    "How many beeps do you hear?",
    "What number comes next: 1, 2, 3?",
    "How old is the tone?",
    "Count the colours you see.",
    "Give any number.",
    "What is {a} + {b}?",
    "What is {a} times {b}?",
)

ANY_NUMBER = "any number"
"""The ground truth of a question with no single right number (the reward asks for a number)."""


def expected_answer(template: str, a: int, b: int) -> str:
    """What a row's question asks for, written as its ground truth (the reward is the number's
    format, not its value: see ``omni_rewards.scorers.builtin_digits``)."""
    if "+" in template:
        return str(a + b)
    if "times" in template:
        return str(a * b)
    if "1, 2, 3" in template:
        return "4"
    return ANY_NUMBER


def builtin_rows(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` task rows: chat messages, one picture, one tone, the reward fields."""
    import numpy as np
    from PIL import Image

    rng = random.Random(seed)
    rows = []
    for index in range(count):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        template = rng.choice(QUESTIONS)
        question = template.format(a=a, b=b)
        colour = tuple(rng.randint(0, 255) for _ in range(3))
        picture = Image.new("RGB", (64, 64), colour)
        hz = rng.choice((220.0, 330.0, 440.0, 660.0))
        t = np.arange(16_000 // 2) / 16_000
        tone = (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": [
                        {"type": "image"}, {"type": "audio"}, {"type": "text", "text": question},
                    ]},
                ],
                "images": [picture],
                "audios": [tone],
                "data_source": DATA_SOURCE,
                "ground_truth": expected_answer(template, a, b),
                "index": index,
            }
        )
    return rows


CLIP_QUESTION = "How many beeps do you hear?"
CLIP_SECONDS = 2.0
"""Each built-in clip's length: two of the tiny model's temporal patches at 2 frames a second,
so the soundtrack's chunks fall between frames."""


def clip_specs(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` clips of the built-in video task: each one's colour, beeps (1 to 3, the ground
    truth) and pitch."""
    rng = random.Random(seed)
    return [{"index": index, "colour": tuple(rng.randint(0, 255) for _ in range(3)), "beeps": rng.randint(1, 3),
             "hz": rng.choice((330.0, 440.0, 660.0))} for index in range(count)]
