"""Our converters against verl-omni's own, row by row, on the same synthetic records.

verl-omni's converters are scripts in its repository (not an installed package), so this
test runs them only when pointed at a copy: set ``VERL_OMNI_SRC`` to a verl-omni checkout,
or to a bare git mirror of it (its ``HEAD`` is read). Checked against a1139baf. The
converter tests (``test_convert_*.py``) hold the same rows written out by hand, and run
without it.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from omni_data.convert import avqa, mmk12

SCRIPTS = "examples/gspo_trainer/data_process"
SOURCE = os.environ.get("VERL_OMNI_SRC", "")

pytestmark = pytest.mark.skipif(not SOURCE, reason="set VERL_OMNI_SRC to a verl-omni checkout or bare mirror")


def load_script(name: str, tmp_path: Path) -> ModuleType:
    """verl-omni's ``data_process/<name>.py`` as a module (from a checkout or a bare mirror)."""
    root = Path(SOURCE)
    path = root / SCRIPTS / f"{name}.py"
    if not path.is_file():
        text = subprocess.run(
            ["git", f"--git-dir={root}", "show", f"HEAD:{SCRIPTS}/{name}.py"],
            capture_output=True, text=True, check=True,
        ).stdout
        path = tmp_path / f"verl_omni_{name}.py"
        path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"verl_omni_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# Our finer drop reasons name rows verl-omni also drops, under its coarser ones.
SAME_DROP = {"blank_answer_label": "invalid_solution", "path_traversal": "missing_image"}


def avqa_records() -> list[dict[str, Any]]:
    base = {
        "problem_id": 7, "problem": " Which event is visible and audible? ", "data_type": "image_audio",
        "problem_type": "multiple choice", "options": ["A. rain", "B. applause", "C. traffic", "D. birds"],
        "solution": "<answer>B</answer>", "path": {"image": "images/s.jpg", "audio": "audios/s.wav"},
    }
    variants: list[dict[str, Any]] = [
        {}, {"solution": "<answer>b</answer>"}, {"solution": "  <ANSWER> c </Answer>\n"},
        {"options": ["a) rain", "b、 applause"], "solution": "<answer>A</answer>"}, {"options": ["B: only"]},
        {"options": ["A. rain", "A. again"]}, {"options": ["A rain"]}, {"options": []}, {"options": "A. rain"},
        {"options": ["A. rain", None]}, {"solution": "<answer>E</answer>"}, {"solution": "B"},
        {"solution": "<answer></answer>"}, {"solution": None}, {"solution": "<answer>A</answer><answer>B</answer>"},
        {"problem": "  "}, {"data_type": "video_audio"}, {"path": {"image": "images/s.jpg"}},
        {"path": {"image": "images/none.jpg", "audio": "audios/s.wav"}},
        {"path": {"image": "../outside.jpg", "audio": "audios/s.wav"}}, {"path": None},
        {"problem_id": None}, {"problem_type": None},
    ]
    records = [{**base, **variant} for variant in variants]
    records.append({k: v for k, v in base.items() if k != "problem_id"})  # falls back to the index
    return records


def test_avqa_rows_match_verl_omni(tmp_path: Path, media: Any) -> None:
    theirs_module = load_script("avqa", tmp_path)
    split_dir = tmp_path / "AVQA_R1" / "train"
    (split_dir / "images").mkdir(parents=True)
    (split_dir / "audios").mkdir()
    media.picture().save(split_dir / "images" / "s.jpg", format="JPEG")
    media.wav(split_dir / "audios" / "s.wav")
    media.picture().save(tmp_path / "AVQA_R1" / "outside.jpg", format="JPEG")
    kept = 0
    for index, record in enumerate(avqa_records()):
        theirs, their_reason = theirs_module.build_rl_row(record, split_dir, "train", index)
        ours, our_reason = avqa.convert_record(record, "train", index, split_dir)
        assert ours == theirs, (index, record)
        if theirs is None:
            assert SAME_DROP.get(our_reason, our_reason) == their_reason, (index, record)
        kept += theirs is not None
    assert kept == 8  # the comparison covered kept rows, not only drops


def mmk12_records(media: Any) -> list[dict[str, Any]]:
    png = media.image_bytes("PNG", seed=1)
    base = {"id": "m-1", "question": "Which angle?\nA. 30°\nB) 60°\nC、 90°", "answer": "B", "subject": "geometry",
            "image": {"bytes": png, "path": "a.png"}}
    variants: list[dict[str, Any]] = [
        {}, {"question": "  Find x.  "}, {"question": "Pick: A. 1 B. 2"}, {"question": "Q\n(A) 1\n(B) 2"},
        {"answer": " b "}, {"answer": "\\frac{1}{2}"}, {"answer": ""}, {"answer": None}, {"question": ""},
        {"image": {"bytes": None, "path": "a.png"}}, {"image": None}, {"image": png},
        {"image": {"bytes": b"not an image", "path": "x.png"}}, {"id": None}, {"id": 0}, {"subject": None},
    ]
    return [{**base, **variant} for variant in variants]


def test_mmk12_rows_match_verl_omni(tmp_path: Path, media: Any) -> None:
    pytest.importorskip("datasets")  # verl-omni's script imports it
    theirs_module = load_script("mmk12", tmp_path)
    keep, build = theirs_module.make_keep_fn(verify_images=True), theirs_module.make_map_fn("train")
    theirs_rows, ours_rows = [], []
    for record in mmk12_records(media):
        if keep(record):
            theirs_rows.append(build(record, len(theirs_rows)))
        ours, _ = mmk12.convert_record(record, "train", len(ours_rows), full_decode=False)
        if ours is not None:
            ours_rows.append(ours)
    assert len(theirs_rows) == 10
    assert ours_rows == theirs_rows


def test_the_prompts_are_verl_omnis_character_for_character(tmp_path: Path) -> None:
    theirs_avqa = load_script("avqa", tmp_path)
    assert avqa.SYSTEM_PROMPT == theirs_avqa.SYSTEM_PROMPT
    assert (avqa.DATA_SOURCE, avqa.ABILITY, avqa.DATASET_NAME) == (
        theirs_avqa.DATA_SOURCE, theirs_avqa.ABILITY, theirs_avqa.DATASET_NAME
    )
    if importlib.util.find_spec("datasets") is not None:
        theirs_mmk12 = load_script("mmk12", tmp_path)
        assert mmk12.user_prompt("Q?") == theirs_mmk12.USER_PROMPT_TEMPLATE.format(
            instruction=theirs_mmk12.INSTRUCTION, question="Q?"
        )
        assert (mmk12.DATA_SOURCE, mmk12.ABILITY, mmk12.DATASET_NAME) == (
            theirs_mmk12.DATA_SOURCE, theirs_mmk12.ABILITY, theirs_mmk12.DATASET_NAME
        )
