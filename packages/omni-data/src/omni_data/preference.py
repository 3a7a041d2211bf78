"""Preference pairs for offline DPO: the parquet row, the dataset, and same-modality batching.

The row is what verl-omni a1139baf's Omni-Preference converter
(``examples/dpo_trainer/data_process/omni_preference_dpo_multisource.py``) writes, column
for column, so its files and ours are read alike:

- ``data_source`` (str), ``prompt`` (chat messages, as in :mod:`omni_data.schema`);
- ``chosen`` / ``rejected``: ``{"role": "assistant", "content": str}`` (a plain string is
  read too);
- ``win_score`` / ``lose_score`` (float; the reader takes a missing or null score as 1.0 /
  0.0, as verl-omni's ``OfflineMLLMDPODataset`` does);
- ``ability`` (str), ``reward_model = {"style": "preference"}`` (no ground truth: nothing
  is scored), ``extra_info`` (dict with ``modality``);
- one media column, ``images``, ``audios`` or ``videos``, or none for a text-only pair.

:func:`modality_batches` and :func:`balanced_indices` are verl-omni's
``ModalityGroupedBatchSampler`` and ``data.balance_max_samples_by_modality`` as functions
of the rows' modalities (:attr:`PreferenceDataset.modalities`), so a trainer's sampler is a
few lines around them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from omni_data.dataset import DatasetConfig, RLDataset
from omni_data.errors import InputFormatError, RowError
from omni_data.rows import ParsedRow, parse_row
from omni_data.schema import MEDIA_COLUMNS, REQUIRED_COLUMNS, write_rl_parquet

MODALITIES: tuple[str, ...] = ("text", "image", "audio", "video")
"""What a row's ``modality`` can be; every batch of :func:`modality_batches` holds one."""
PREFERENCE_COLUMNS: tuple[str, ...] = ("chosen", "rejected")
"""Columns a preference file needs besides the RL ones (:data:`omni_data.schema.REQUIRED_COLUMNS`)."""
DEFAULT_WIN_SCORE = 1.0
DEFAULT_LOSE_SCORE = 0.0

EMPTY_ANSWER = "empty_answer"
IDENTICAL_PAIR = "identical_pair"
BAD_ANSWER = "bad_answer"
BAD_SCORE = "bad_score"
MISSING_MEDIA = "missing_media"
BAD_REWARD_MODEL = "bad_reward_model"


def preference_row(
    *,
    data_source: str,
    messages: Sequence[Mapping[str, str]],
    chosen: str,
    rejected: str,
    modality: str,
    extra_info: Mapping[str, Any],
    win_score: float | None = None,
    lose_score: float | None = None,
    ability: str | None = None,
    images: Sequence[Any] | None = None,
    audios: Sequence[Any] | None = None,
    videos: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """One preference row as a plain dict, columns in verl-omni's order.

    ``ability`` defaults to ``"{modality}_qa"`` (verl-omni's ``image_qa``, ...); a missing
    score is written as 1.0 (win) / 0.0 (lose), as the reader would take it.

    Raises:
        ValueError: ``modality`` is not one of :data:`MODALITIES`, or the media columns do
            not match it (a ``"text"`` pair has none; any other exactly its own, non-empty).
    """
    if modality not in MODALITIES:
        raise ValueError(f"modality must be one of {list(MODALITIES)}, got {modality!r}.")
    given = {column: list(value) for column, value in (("images", images), ("audios", audios), ("videos", videos))
             if value is not None}
    expected = MEDIA_COLUMNS.get(modality)
    if (expected is None and given) or (expected is not None and (list(given) != [expected] or not given[expected])):
        wanted = "no media column" if expected is None else f"a non-empty {expected!r} column only"
        raise ValueError(f"A {modality!r} preference row takes {wanted}, got {sorted(given) or 'none'}.")
    row: dict[str, Any] = {
        "data_source": data_source,
        "chosen": {"role": "assistant", "content": chosen},
        "rejected": {"role": "assistant", "content": rejected},
        "win_score": float(DEFAULT_WIN_SCORE if win_score is None else win_score),
        "lose_score": float(DEFAULT_LOSE_SCORE if lose_score is None else lose_score),
        "ability": ability if ability is not None else f"{modality}_qa",
        "reward_model": {"style": "preference"},
        "extra_info": {**extra_info, "modality": modality},
        "prompt": [{"role": m["role"], "content": m["content"]} for m in messages],
    }
    row.update(given)
    return row


def write_preference_parquet(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Write rows as one parquet file: :func:`omni_data.schema.write_rl_parquet`, except that
    no rows still give the preference columns, so the dataset reads the file as empty
    rather than malformed."""
    out = Path(path)
    if rows:
        return write_rl_parquet(rows, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    names = (*REQUIRED_COLUMNS, *PREFERENCE_COLUMNS)
    pq.write_table(pa.table({name: pa.array([], type=pa.string()) for name in names}), out)
    return out


@dataclass(frozen=True)
class PreferencePair:
    """A row's answers and scores, read and checked (see :func:`read_pair`)."""

    chosen: str
    rejected: str
    win_score: float
    lose_score: float


def _answer_text(value: object, column: str, where: str) -> str:
    if isinstance(value, Mapping):
        value = value.get("content", value.get("text"))
    if not isinstance(value, str):
        raise RowError(
            f"{where}: column {column!r} must be a string or {{'role': 'assistant', 'content': str}}, "
            f"got {str(value)[:80]!r}.",
            reason=BAD_ANSWER,
        )
    if not value.strip():
        raise RowError(
            f"{where}: the {column} answer is empty; a pair needs two non-empty answers. Fix the row, or set "
            f"on_bad_row=skip to leave such rows out (counted as {EMPTY_ANSWER}).",
            reason=EMPTY_ANSWER,
        )
    return value


def _score(value: object, column: str, default: float, where: str) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RowError(f"{where}: column {column!r} must be a finite number, got {value!r}.", reason=BAD_SCORE)
    return float(value)


def read_pair(fields: Mapping[str, Any], *, where: str) -> PreferencePair:
    """The chosen and rejected answers and their scores of one row (its parquet columns).

    Raises:
        RowError: ``bad_answer`` (neither a string nor an assistant message),
            ``empty_answer`` (blank after stripping), ``identical_pair`` (the two answers
            are equal after stripping: the DPO loss is then a constant) or ``bad_score``.
    """
    chosen = _answer_text(fields.get("chosen"), "chosen", where)
    rejected = _answer_text(fields.get("rejected"), "rejected", where)
    if chosen.strip() == rejected.strip():
        raise RowError(
            f"{where}: chosen and rejected are the same answer ({chosen.strip()[:60]!r}); such a pair teaches "
            f"nothing (its DPO loss has no gradient). Drop it, or set on_bad_row=skip (counted as {IDENTICAL_PAIR}).",
            reason=IDENTICAL_PAIR,
        )
    return PreferencePair(
        chosen=chosen,
        rejected=rejected,
        win_score=_score(fields.get("win_score"), "win_score", DEFAULT_WIN_SCORE, where),
        lose_score=_score(fields.get("lose_score"), "lose_score", DEFAULT_LOSE_SCORE, where),
    )


def _named_modality(value: object) -> str | None:
    """``image``, ``video`` or ``audio`` when ``value``'s text names one (checked in that
    order, as verl-omni's ``_normalise_modality``), else None."""
    text = str(value or "").lower()
    return next((kind for kind in ("image", "video", "audio") if kind in text), None)


def row_modality(parsed: ParsedRow) -> str:
    """The row's modality, decided as verl-omni's ``_row_modality``: ``extra_info.modality``
    when set, else the first medium the row has (image, video, audio), else a medium named
    in ``data_source``, else ``"text"``. Media inside content parts count as media too."""
    extra_info = parsed.fields.get("extra_info")
    declared = extra_info.get("modality") if isinstance(extra_info, Mapping) else None
    if declared:
        return _named_modality(declared) or "text"
    kinds = {ref.kind for ref in parsed.media}
    found = next((kind for kind in ("image", "video", "audio") if kind in kinds), None)
    return found or _named_modality(parsed.fields.get("data_source")) or "text"


class PreferenceDataset(RLDataset):
    """Map-style dataset over preference parquet files (the form of :func:`preference_row`).

    Rows are checked and encoded as :class:`RLDataset` checks and encodes prompts, same
    ``DatasetConfig`` and ``on_bad_row`` contract, except that ``reward_model`` needs no
    ground truth. A row is also bad when an answer is not text
    (``bad_answer``), blank (``empty_answer``), both answers are equal (``identical_pair``),
    a score is not a finite number (``bad_score``), or its modality names a medium the row
    does not have (``missing_media``).

    ``dataset[i]`` is what :class:`RLDataset` returns (the prompt encoded) plus ``chosen``
    and ``rejected`` (str), ``win_score`` and ``lose_score`` (float) and ``modality``.
    """

    def __init__(
        self,
        data_files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        processor: Any,
        config: DatasetConfig | None = None,
    ) -> None:
        loading: dict[tuple[int, int], str] = {}
        self._modality_of: dict[tuple[int, int], str] | None = loading  # filled by _parse while loading
        super().__init__(data_files, processor, config)
        self.report.label = "preference dataset"
        self._modalities = [loading[key] for key in self._rows]
        self._modality_of = None

    @property
    def modalities(self) -> list[str]:
        """Every kept row's modality, in dataset order (nothing encoded), for
        :func:`modality_batches` and :func:`balanced_indices`."""
        return list(self._modalities)

    def _load(self) -> None:
        for path, table in zip(self.files, self._tables, strict=True):
            missing = [c for c in PREFERENCE_COLUMNS if c not in table.column_names]
            if missing:
                raise InputFormatError(
                    f"{path} lacks preference column(s) {missing} (it has {table.column_names}); convert the raw "
                    "pairs with `uv run trainer convert omni_preference --input DIR --output-dir DIR`, or write rows with "
                    "omni_data.preference_row."
                )
        super()._load()

    def _check_reward(self, parsed: ParsedRow, where: str) -> None:
        """A preference row's ``reward_model`` is ``{"style": "preference"}``: no ground truth."""
        if not isinstance(parsed.fields.get("reward_model"), Mapping):
            raise RowError(
                f"{where}: column 'reward_model' must be a dict (a preference row's is "
                f"{{'style': 'preference'}}), got {parsed.fields.get('reward_model')!r}.",
                reason=BAD_REWARD_MODEL,
            )

    def _parse(self, file_index: int, row: int) -> ParsedRow:
        parsed = super()._parse(file_index, row)
        where = self._where(file_index, row)
        read_pair(parsed.fields, where=where)
        modality = row_modality(parsed)
        if modality != "text" and modality not in {ref.kind for ref in parsed.media}:
            raise RowError(
                f"{where}: the row's modality is {modality!r} (from extra_info.modality, or else data_source) but it "
                f"has no {modality}; add it to the {MEDIA_COLUMNS[modality]!r} column with a <{modality}> "
                "placeholder in the prompt, or set extra_info.modality to 'text'.",
                reason=MISSING_MEDIA,
            )
        if self._modality_of is not None:
            self._modality_of[(file_index, row)] = modality
        return parsed

    def __getitem__(self, item: int) -> dict[str, Any]:
        out = super().__getitem__(item)
        file_index, row = self._rows[item]
        table = self._tables[file_index]
        columns = [c for c in (*PREFERENCE_COLUMNS, "win_score", "lose_score") if c in table.column_names]
        pair = read_pair(table.select(columns).slice(row, 1).to_pylist()[0], where=self._where(file_index, row))
        out.update(
            chosen=pair.chosen,
            rejected=pair.rejected,
            win_score=pair.win_score,
            lose_score=pair.lose_score,
            modality=self._modalities[item],
        )
        return out


def _by_modality(modalities: Sequence[str]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for index, modality in enumerate(modalities):
        groups.setdefault(modality, []).append(index)
    return dict(sorted(groups.items()))


def modality_batches(
    modalities: Sequence[str],
    batch_size: int,
    *,
    seed: int,
    epoch: int = 0,
    num_batches: int | None = None,
    weights: Mapping[str, float] | None = None,
    replacement: bool = True,
    drop_last: bool = True,
) -> list[list[int]]:
    """Batches of row indices, each of one modality: verl-omni's ``ModalityGroupedBatchSampler``.

    ``replacement=True`` (training): each batch draws a modality with probability
    proportional to ``weights`` (absent: 1.0), then ``batch_size`` of its rows uniformly
    *with replacement*, from ``torch.Generator().manual_seed(seed + epoch)`` and the same
    calls verl-omni makes, so both give the same batches for a seed. Rows repeat or are never
    drawn: this is not a partition. ``num_batches`` defaults to ``len // batch_size``
    (``ceil`` without ``drop_last``).

    ``replacement=False`` (validation): every row once, in order, cut into chunks of
    ``batch_size`` per modality, modalities in sorted order; ``drop_last`` drops each
    modality's partial chunk. ``seed``, ``epoch``, ``num_batches`` and ``weights`` play no
    part (as in verl-omni).

    Raises:
        ValueError: ``batch_size`` is not positive, a weight is negative or names neither a
            known modality nor one of the rows', the weights of the present modalities sum to
            zero, or batches are asked of no rows.
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}.")
    weights = dict(weights or {})
    unknown = sorted(set(weights) - set(MODALITIES) - set(modalities))
    if unknown:
        raise ValueError(
            f"weights name unknown modalities {unknown}; modalities are {list(MODALITIES)} (and any in the rows)."
        )
    negative = {m: w for m, w in weights.items() if w < 0}
    if negative:
        raise ValueError(f"weights must be non-negative, got {negative}.")
    groups = _by_modality(modalities)
    if not replacement:
        chunks = [indices[start : start + batch_size] for indices in groups.values()
                  for start in range(0, len(indices), batch_size)]
        return [chunk for chunk in chunks if len(chunk) == batch_size or not drop_last]
    if num_batches is None:
        num_batches = len(modalities) // batch_size if drop_last else -(-len(modalities) // batch_size)
    if num_batches <= 0:
        return []
    if not groups:
        raise ValueError(f"{num_batches} batches asked of an empty dataset.")
    import torch

    names = list(groups)
    probabilities = torch.tensor([float(weights.get(m, 1.0)) for m in names], dtype=torch.float)
    if probabilities.sum().item() <= 0:
        raise ValueError(f"weights give every present modality ({names}) zero weight: {weights}.")
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    batches: list[list[int]] = []
    for _ in range(num_batches):
        picked = int(torch.multinomial(probabilities, num_samples=1, replacement=True, generator=generator).item())
        indices = groups[names[picked]]
        draws = torch.randint(len(indices), (batch_size,), generator=generator).tolist()
        batches.append([indices[d] for d in draws])
    return batches


def balanced_indices(
    modalities: Sequence[str], max_samples: int, *, seed: int | None, shuffle: bool = True
) -> list[int]:
    """At most ``max_samples`` row indices spread evenly over the modalities: verl-omni's
    ``data.balance_max_samples_by_modality`` (``_balanced_modality_sample_indices``).

    Each modality's quota is ``max_samples // M``, one more for the first ``remainder``
    modalities in sorted order, capped by its rows; what a small modality cannot fill goes
    round-robin (sorted order) to those with rows left. With ``shuffle``, each modality's
    rows are drawn without replacement by ``numpy.random.default_rng(seed)`` (as verl-omni,
    so the same seed selects the same rows; ``seed=None`` differs run to run), else its
    first rows are taken. The result lists the modalities one after another, in sorted
    order. As verl-omni applies it only when ``0 < max_samples < len(modalities)``, any
    other ``max_samples`` returns every index in order.
    """
    total = len(modalities)
    if not 0 < max_samples < total:
        return list(range(total))
    groups = _by_modality(modalities)
    names = list(groups)
    base, remainder = divmod(max_samples, len(names))
    quotas = {m: min(base + (1 if i < remainder else 0), len(groups[m])) for i, m in enumerate(names)}
    left = max_samples - sum(quotas.values())
    while left > 0:
        for m in names:
            if left and quotas[m] < len(groups[m]):
                quotas[m] += 1
                left -= 1
    import numpy as np

    rng = np.random.default_rng(seed) if shuffle else None
    selected: list[int] = []
    for m in names:
        if quotas[m] <= 0:
            continue
        if rng is not None:
            selected.extend(int(i) for i in rng.choice(groups[m], size=quotas[m], replace=False))
        else:
            selected.extend(groups[m][: quotas[m]])
    return selected
