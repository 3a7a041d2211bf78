"""Dataset converters and the multimodal RL dataset.

- ``omni_data.convert``: raw gsm8k / MMK12 / AVQA-R1-6K files → RL parquet, and
  Omni-Preference → preference parquet (``python -m omni_data.convert --help``).
- :class:`RLDataset`: RL parquet → prompt ids and multimodal tensors through a model's
  processor, media decoded with Qwen's loaders only when a row is read.
- :class:`PreferenceDataset`: preference parquet (chosen/rejected pairs) for offline DPO;
  :func:`modality_batches` and :func:`balanced_indices` group and subsample its rows by
  modality as verl-omni does.

Importing this package loads neither torch nor transformers.
"""

from omni_data.dataset import DatasetConfig, LoadReport, RLDataset
from omni_data.errors import InputFormatError, MediaError, OmniDataError, RowError
from omni_data.media import DecodedMedia, MediaSettings, decode_all, settings_from_processor
from omni_data.preference import (
    PreferenceDataset,
    balanced_indices,
    modality_batches,
    preference_row,
    write_preference_parquet,
)
from omni_data.rows import MediaRef, ParsedRow, media_in_messages, parse_row
from omni_data.schema import rl_row, write_rl_parquet

__all__ = [
    "DatasetConfig",
    "DecodedMedia",
    "InputFormatError",
    "LoadReport",
    "MediaError",
    "MediaRef",
    "MediaSettings",
    "OmniDataError",
    "ParsedRow",
    "PreferenceDataset",
    "RLDataset",
    "RowError",
    "balanced_indices",
    "decode_all",
    "media_in_messages",
    "modality_batches",
    "parse_row",
    "preference_row",
    "rl_row",
    "settings_from_processor",
    "write_preference_parquet",
    "write_rl_parquet",
]
