"""The embedded default's files, for engines that read data from files (verl), and its judges.

The built-in task itself (its rows, clips and preference pairs, and their parquet files) is
omni-data's (:mod:`omni_data.builtin`); this module points an embedded-default run at the tiny
Qwen3-Omni's cached build and those files (:func:`use_builtin_files`).

:func:`builtin_judge` is the built-in task's judge, a tiny checkpoint built offline
(``trainer tiny-judge``); :func:`qi_judge` is a tiny judge for OmniVideo-R1 QI's judged reward
(``trainer tiny-judge --qi``).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omni_data.builtin import BUILTIN_VALIDATION_ROWS, write_builtin_clips, write_builtin_pairs, write_builtin_task
from omni_rewards.scorers.builtin_digits import JUDGE_RUBRIC, digits_rule, judge_answer

from omni_trainer.embedded_model import EMBEDDED_MODEL, embedded_model_path
from omni_trainer.tasks import PREFERENCE, task_name


def builtin_preference_files(config: Any) -> tuple[list[str], list[str]]:
    """The built-in preference pairs (``data.builtin_task_size`` of them, from ``data.seed``) as
    ``(train, val)`` parquet files in the cache."""
    from omni_model_kit.tiny import default_cache_dir

    train, val = write_builtin_pairs(default_cache_dir(), train_pairs=config.data.builtin_task_size,
                                     seed=config.data.seed)
    return [str(train)], [str(val)]


def use_builtin_files(config: Any) -> bool:
    """For an engine that reads files: give the embedded default (no model path, no train
    files) the tiny Qwen3-Omni's cached build and the built-in task's files. Returns whether
    it did; ``config`` is changed in place before the pre-flight checks it."""
    model, data = config.actor_rollout_ref.model, config.data
    if model.path is not None or data.train_files is not None or model.stage != "thinker":
        return False
    from omni_model_kit.tiny import default_cache_dir

    model.path = embedded_model_path()
    if task_name(config) == PREFERENCE:  # the built-in pairs, as the local engine trains on
        data.train_files, data.val_files = builtin_preference_files(config)
        task = "built-in preference pairs"
    else:
        write = write_builtin_clips if data.hears_soundtracks else write_builtin_task
        train, val = write(default_cache_dir(), train_rows=data.builtin_task_size, val_rows=BUILTIN_VALIDATION_ROWS,
                           seed=data.seed)
        data.train_files, data.val_files = [str(train)], [str(val)]
        task = "built-in clip task" if data.hears_soundtracks else "built-in task"
    print(f"model: {EMBEDDED_MODEL} built offline at {model.path}; {task}: "
          f"{Path(data.train_files[0]).parent}", file=sys.stderr)
    return True


JUDGE_RULE = "builtin-digits-v1"
"""Names the built-in judge's rule (and its version) in its cache key."""


def builtin_judge() -> Path:
    """The built-in task's judge (``trainer tiny-judge``): the tiny chat model taught
    ``JUDGE_RUBRIC``'s rule on :func:`judge_examples`, built offline and cached. With it,
    ``reward.reward_model`` and ``omni_rewards.scorers.builtin_digits.compute_score_judged`` pay
    what the rule scorer pays."""
    from omni_model_kit.tiny_judge import build_tiny_judge

    policy = embedded_model_path()
    return build_tiny_judge(f"{JUDGE_RULE}-{Path(policy).name}", judge_examples())


def judge_examples() -> Callable[[random.Random], tuple[str, str]]:
    """``JUDGE_RUBRIC``'s messages about answers like the embedded policy's (1 to 4 random
    tokens of its tokenizer, a number put in front of a third of them and a digit inside another
    third), each with the rule's verdict as the judge answers it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(embedded_model_path())
    special = set(tokenizer.all_special_ids)
    ids = [i for i in range(len(tokenizer)) if i not in special]

    def example(rng: random.Random) -> tuple[str, str]:
        text = str(tokenizer.decode([rng.choice(ids) for _ in range(rng.randint(1, 4))], skip_special_tokens=True))
        draw = rng.random()
        if draw < 1 / 3:
            text = f"{rng.randint(0, 99)}{text}"
        elif draw < 2 / 3:
            cut = rng.randint(0, len(text))
            text = f"{text[:cut]}{rng.randint(0, 9)}{text[cut:]}"
        return JUDGE_RUBRIC.format(answer=text), judge_answer(digits_rule(text))

    return example


QI_JUDGE_RULE = "qi-rubric-v2"
"""Names the tiny QI judge's rule (and its version) in its cache key."""
QI_JUDGE_STEPS = 100
QI_VERDICTS = {"consistency": 1.0, "completeness": 0.5, "answer": 0.25}
"""The tiny QI judge's verdict per rubric (:func:`qi_judge_rule`); no rule pays an answer 0.25."""


def qi_judge() -> Path:
    """A tiny judge for OmniVideo-R1 QI's judged reward (``trainer tiny-judge --qi``): the tiny
    vision model taught :func:`qi_judge_rule` on :func:`qi_judge_examples`, built offline and
    cached. It answers :mod:`omni_rewards.scorers.omnivideo_qi_judge`'s three rubrics, frames
    and all, with a JSON score, so a tiny run's judged reward is read, never failed."""
    from omni_model_kit.tiny_judge import build_tiny_vision_judge

    return build_tiny_vision_judge(QI_JUDGE_RULE, qi_judge_examples(), steps=QI_JUDGE_STEPS)


def qi_judge_rule(rubric: str) -> float:
    """The tiny QI judge's verdict: one number per rubric (:data:`QI_VERDICTS`), whatever it is
    shown, so that a swapped verdict shows in the sum. A tiny model learns to read pictures and
    words too slowly for a test (brightness and a word, tried: under 60% after 200 steps)."""
    return QI_VERDICTS[rubric]


def qi_judge_examples() -> Callable[[random.Random], tuple[list[dict[str, Any]], list[Any], str]]:
    """Conversations as ``omnivideo_qi_judge`` asks them (its rubrics and prompts with random
    words; 1 to 8 frames of random brightness and size for a segment, text only for an
    answer), each with :func:`qi_judge_rule`'s verdict as the judge answers it."""
    import numpy as np
    from PIL import Image

    from omni_rewards.scorers import omnivideo_qi_judge as qi

    words = "a the door dog red blue opens barks man woman car bell rings plays piano water runs".split()

    def phrase(rng: random.Random) -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(0, 5)))

    def example(rng: random.Random) -> tuple[list[dict[str, Any]], list[Any], str]:
        rubric = rng.choice(sorted(QI_VERDICTS))
        images: list[Any] = []
        if rubric == "answer":
            system, text = qi.ANSWER_RUBRIC, qi.ANSWER_PROMPT.format(question=phrase(rng), ground_truth=phrase(rng),
                                                                      answer=phrase(rng))
        else:
            side = rng.choice([28, 56, 112, 336])
            images = [Image.fromarray(np.full((side, side, 3), rng.randint(0, 255), np.uint8))
                      for _ in range(rng.randint(1, 8))]
            system, text = ((qi.CONSISTENCY_RUBRIC, qi.CONSISTENCY_PROMPT.format(caption=phrase(rng)))
                            if rubric == "consistency" else (qi.COMPLETENESS_RUBRIC, qi.COMPLETENESS_PROMPT.format(
                                question=phrase(rng), ground_truth=phrase(rng))))
        messages = [{"role": "system", "content": [{"type": "text", "text": system}]},
                    {"role": "user", "content": [*({"type": "image"} for _ in images), {"type": "text", "text": text}]}]
        return messages, images, '{"score": %g}' % qi_judge_rule(rubric)

    return example
