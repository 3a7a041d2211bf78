"""Recipe converters: raw dataset files → RL parquet. See ``omni_data.convert.cli``."""

from omni_data.convert.report import ConversionReport, SplitReport

__all__ = ["ConversionReport", "SplitReport"]
