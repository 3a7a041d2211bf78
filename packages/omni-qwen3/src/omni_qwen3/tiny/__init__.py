"""An offline tiny Qwen3-Omni checkpoint for tests, the embedded default and laptops."""

from omni_model_kit.tiny import default_cache_dir
from omni_qwen3.tiny.build import SERVED_TALKER_SPEC, TinySpec, build_tiny_qwen3_omni

__all__ = ["SERVED_TALKER_SPEC", "TinySpec", "build_tiny_qwen3_omni", "default_cache_dir"]
