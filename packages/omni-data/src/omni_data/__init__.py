"""Dataset converters and the multimodal RL dataset.

- ``omni_data.convert``: raw gsm8k / MMK12 / AVQA-R1-6K files → RL parquet
  (``python -m omni_data.convert --help``).
- :class:`RLDataset`: RL parquet → prompt ids and multimodal tensors through a model's
  processor, media decoded with Qwen's loaders only when a row is read.

Importing this package loads neither torch nor transformers.
"""

from omni_data.dataset import DatasetConfig, LoadReport, RLDataset
from omni_data.errors import InputFormatError, MediaError, OmniDataError, RowError
from omni_data.media import DecodedMedia, MediaSettings, decode_all, settings_from_processor
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
    "RLDataset",
    "RowError",
    "decode_all",
    "media_in_messages",
    "parse_row",
    "rl_row",
    "settings_from_processor",
    "write_rl_parquet",
]
