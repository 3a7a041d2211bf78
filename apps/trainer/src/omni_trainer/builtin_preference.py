"""The built-in preference task of ``algorithm.sample_source=offline`` without data files.

The built-in RL task's questions (:mod:`omni_trainer.builtin_task`) as preference pairs in
verl-omni's Omni-Preference form, one modality per row as that release has them: a picture,
a tone, or text alone. The chosen answer gives a number; the rejected one does not (an
evasion). A policy that learns the preference prefers numbers on held-out questions too, so
validation preference accuracy climbs from about 0.5 (the reference's own preferences) to 1.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from omni_trainer import builtin_task
from omni_trainer.config import Config

DATA_SOURCE = "omni_rl/builtin_preference"
MODALITIES = ("image", "audio", "text")
EVASIONS = (
    "I cannot tell from this.",
    "Hard to say, sorry.",
    "It depends on what you mean.",
    "Let me think about it later.",
    "That is not clear to me.",
    "Nobody knows for sure.",
)
VALIDATION_PAIRS = 24


def builtin_pairs(count: int, seed: int, media_dir: Path, *, split: str) -> list[dict[str, Any]]:
    """``count`` preference rows, modalities in turn; media written under ``media_dir``."""
    import soundfile as sf  # type: ignore[import-untyped]

    from omni_data import preference_row

    media_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    rows = []
    for source in builtin_task.builtin_rows(count, seed=seed):
        index = source["index"]
        modality = MODALITIES[index % len(MODALITIES)]
        (message,) = source["messages"]
        question = next(part["text"] for part in message["content"] if part["type"] == "text")
        truth = source["ground_truth"]
        number = truth if truth != builtin_task.ANY_NUMBER else str(rng.randint(1, 9))
        media: dict[str, Any] = {}
        if modality == "image":
            path = media_dir / f"picture-{index}.png"
            source["images"][0].save(path)
            media["images"] = [str(path)]
        elif modality == "audio":
            path = media_dir / f"tone-{index}.wav"
            sf.write(path, source["audios"][0], 16_000)
            media["audios"] = [str(path)]
        placeholder = "" if modality == "text" else f"<{modality}>"
        rows.append(preference_row(
            data_source=DATA_SOURCE, messages=[{"role": "user", "content": f"{placeholder}{question}"}],
            chosen=f"{number}.", rejected=rng.choice(EVASIONS), modality=modality,
            extra_info={"split": split, "index": index}, win_score=1.0, lose_score=0.0, **media,
        ))
    return rows


def builtin_preference_files(config: Config) -> tuple[list[str], list[str]]:
    """The built-in pairs as ``(train, val)`` parquet files in the cache, written once per size
    and seed (training rows from ``data.seed``, validation rows from ``data.seed + 1``)."""
    from omni_data.schema import write_rl_parquet
    from omni_model_kit.tiny import default_cache_dir

    size, seed = config.data.builtin_task_size, config.data.seed
    out = default_cache_dir() / f"builtin-preference-{size}-{VALIDATION_PAIRS}-seed{seed}"
    files = []
    for name, count, split_seed in (("train", size, seed), ("val", VALIDATION_PAIRS, seed + 1)):
        path = out / f"{name}.parquet"
        if not path.is_file():
            tmp = path.with_suffix(".tmp")
            write_rl_parquet(builtin_pairs(count, split_seed, out / f"{name}-media", split=name), tmp)
            tmp.replace(path)
        files.append([str(path)])
    return files[0], files[1]
