"""Dataset converters and the multimodal RL dataset.

- ``omni_data.convert``: raw gsm8k / MMK12 / AVQA-R1-6K files → RL parquet
  (``python -m omni_data.convert --help``).
- :class:`RLDataset`: RL parquet → prompt ids and multimodal tensors through a model's
  processor, media decoded with Qwen's loaders only when a row is read.

Importing this package loads neither torch nor transformers.
"""

from omni_data.dataset import DatasetConfig, LoadReport, RLDataset
from omni_data.errors import InputFormatError, MediaError, OmniDataError, RowError
from omni_data.rows import MediaRef, ParsedRow, parse_row
from omni_data.schema import rl_row, write_rl_parquet

__all__ = [
    "DatasetConfig",
    "InputFormatError",
    "LoadReport",
    "MediaError",
    "MediaRef",
    "OmniDataError",
    "ParsedRow",
    "RLDataset",
    "RowError",
    "parse_row",
    "rl_row",
    "write_rl_parquet",
]
