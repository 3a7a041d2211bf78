"""AudioMCQ (``Harland/AudioMCQ-StrongAC-GeminiCoT``, alias ``audio_mcq``): the answer's text or
its choice label inside ``<answer>``, as verl-omni's ``verl_omni/utils/reward_score/audio_mcq.py``
scores it.

The ground truth is what ``omni_data.convert.audiomcq`` writes: ``{answer, choices,
correct_choice_index, correct_choice_indices}``. It is checked before the response is read:
the correct choices are those equal to the answer under the comparison below, and there must
be at least one; ``correct_choice_indices``, when given, must name exactly those, else
``correct_choice_index`` must be one of them. A ground truth that fails raises
:class:`AudioMCQGroundTruthError` (the reward manager counts the sample as failed), never a
silent 0.

Comparison: NFKC, whitespace runs as one space, surrounding quotes and ``. , ; : ! ?`` (ASCII
and CJK) stripped, case-folded. So ``" Ｄｏｇ! "`` is ``dog`` and ``"(B)"`` is ``(b)``.

Response: every ``<answer …>…</answer …>`` pair (tag names in any case, whitespace allowed
before ``>``, no attributes; the shortest content from each opening tag) is read:

- ``format_valid`` is 1.0 for exactly one pair whose content is not empty after the comparison's
  normalisation;
- ``content_correct`` (= ``score``) is 1.0 when all pairs agree, the last is not empty, and it
  is the answer's text, or a correct choice's letter as ``b``, ``b)`` or ``(b)`` (any case).
  Several tags that agree can be correct without being ``format_valid``.

Deliberate differences, all in reading the ground truth (a response is scored as there):

- A plain text ground truth pays its text only. verl-omni makes it an answer with itself as
  the only choice, so ``a``, ``a)`` and ``(a)`` would be correct whatever the question.

- The ground truth is also read as JSON text of the object (a row dumped to text, or a
  string column); verl-omni would score such text as a plain answer. Lists may be tuples or
  numpy arrays (a parquet struct read back by pandas), as there.
- ``correct_choice_index`` must also agree with the answer when ``correct_choice_indices``
  is given; verl-omni then ignores it. A ``None`` index field (a parquet struct fills a key
  some rows lack with null) is read as absent, where verl-omni fails on it.
- Every malformed ground truth (missing ``answer`` or ``choices``, ``choices`` given as one
  string, an index that is not an integer, any other type) raises the one error with an
  actionable message; verl-omni raises a ``KeyError``/``TypeError`` or iterates a string's
  characters as choices.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omni_rewards.errors import RewardError
from omni_rewards.registry import SCORERS

DATA_SOURCE = "Harland/AudioMCQ-StrongAC-GeminiCoT"
ALIAS = "audio_mcq"

_ANSWER_PAIR = re.compile(r"<answer\s*>(.*?)</answer\s*>", re.IGNORECASE | re.DOTALL)
_SURROUNDING_PUNCTUATION = " \t\r\n\"'`“”‘’.,;:!?！？。，；："


class AudioMCQGroundTruthError(RewardError, ValueError):
    """An AudioMCQ ground truth that cannot be scored against: fix the dataset row."""


@dataclass(frozen=True)
class ChoiceTruth:
    """What a response is compared with: the answer's key and the correct choices' label forms."""

    answer: str
    labels: frozenset[str]


def normalize_answer(text: str) -> str:
    """The comparison key: NFKC, whitespace runs as one space, quotes and end punctuation
    stripped from both ends, case-folded."""
    collapsed = " ".join(unicodedata.normalize("NFKC", text).split())
    return collapsed.strip(_SURROUNDING_PUNCTUATION).casefold()


def label_forms(index: int) -> set[str]:
    """How choice ``index`` may be named: ``b``, ``b)``, ``(b)`` for index 1."""
    letter = chr(ord("a") + index)
    return {letter, f"{letter})", f"({letter})"}


def _fail(ground_truth: object, problem: str) -> AudioMCQGroundTruthError:
    return AudioMCQGroundTruthError(
        f"AudioMCQ ground truth {ground_truth!r}: {problem}. Fix reward_model.ground_truth in the dataset "
        "(omni_data.convert.audiomcq writes {answer, choices, correct_choice_index, correct_choice_indices} "
        "and drops ambiguous records as ambiguous_answer)."
    )


def _as_list(value: object, field: str, ground_truth: object) -> list[Any]:
    """A list field as a Python list: a list, tuple or numpy array (via ``tolist``)."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        value = tolist()
    if not isinstance(value, (list, tuple)):
        raise _fail(ground_truth, f"{field} must be a list, got {type(value).__name__}")
    return list(value)


def _as_index(value: object, field: str, ground_truth: object) -> int:
    try:
        return int(value)  # type: ignore[call-overload]  # numpy integers, and verl-omni's int()
    except (TypeError, ValueError) as exc:
        raise _fail(ground_truth, f"{field} holds {value!r}, not an integer") from exc


def _correct_indices(truth: Mapping[str, Any], answer: str, choices: list[str]) -> list[int]:
    """The positions of the choices equal to the answer, checked against the index fields."""
    key = normalize_answer(answer)
    matching = [i for i, choice in enumerate(choices) if normalize_answer(choice) == key]
    if not matching:
        raise _fail(truth, f"the answer {answer!r} is not among the choices {choices}")
    indices = truth.get("correct_choice_indices")
    if indices is not None:
        field = "correct_choice_indices"
        given = {_as_index(i, field, truth) for i in _as_list(indices, field, truth)}
        if given != set(matching):
            raise _fail(truth, f"{field} {sorted(given)} disagree with the choices equal to the answer, {matching}")
    index = truth.get("correct_choice_index")
    if index is not None and _as_index(index, "correct_choice_index", truth) not in matching:
        raise _fail(truth, f"correct_choice_index {index!r} is not a choice equal to the answer ({matching})")
    return matching


def _from_mapping(truth: Mapping[str, Any]) -> ChoiceTruth:
    missing = [field for field in ("answer", "choices") if field not in truth]
    if missing:
        raise _fail(truth, f"it lacks {' and '.join(missing)}")
    answer = str(truth["answer"])
    choices = [str(choice) for choice in _as_list(truth["choices"], "choices", truth)]
    indices = _correct_indices(truth, answer, choices)
    return ChoiceTruth(normalize_answer(answer), frozenset(form for i in indices for form in label_forms(i)))


def read_ground_truth(ground_truth: object) -> ChoiceTruth:
    """The ground truth as a :class:`ChoiceTruth`: a mapping, its JSON text, or a plain answer.

    Raises:
        AudioMCQGroundTruthError: see the module docstring.
    """
    if isinstance(ground_truth, str) and ground_truth.lstrip().startswith("{"):
        try:
            parsed = json.loads(ground_truth)
        except ValueError:
            parsed = None
        if isinstance(parsed, Mapping):
            ground_truth = parsed
    if isinstance(ground_truth, Mapping):
        return _from_mapping(ground_truth)
    if isinstance(ground_truth, str):
        return ChoiceTruth(normalize_answer(ground_truth), frozenset())
    raise _fail(ground_truth, f"expected a mapping, its JSON text or a plain answer, got {type(ground_truth).__name__}")


@SCORERS.register(DATA_SOURCE, ALIAS)
def score_audio_mcq(
    solution_str: str,
    ground_truth: str | Mapping[str, Any],
    extra_info: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """Score one AudioMCQ response; see the module docstring.

    Returns:
        ``score`` (= ``content_correct``), ``content_correct`` and ``format_valid``, each 0.0 or 1.0.

    Raises:
        AudioMCQGroundTruthError: the ground truth cannot be scored against.
    """
    truth = read_ground_truth(ground_truth)
    payloads = [normalize_answer(payload) for payload in _ANSWER_PAIR.findall(solution_str or "")]
    final = payloads[-1] if payloads else ""
    format_valid = float(len(payloads) == 1 and bool(final))
    agreed = bool(final) and len(set(payloads)) == 1
    correct = float(agreed and (final == truth.answer or final in truth.labels))
    return {"score": correct, "content_correct": correct, "format_valid": format_valid}
