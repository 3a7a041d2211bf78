"""An offline tiny Qwen3-Omni checkpoint for tests, the embedded default and laptops."""

from omni_model_kit.tiny import default_cache_dir
from omni_qwen3.tiny.build import TinySpec, build_tiny_qwen3_omni

__all__ = ["TinySpec", "build_tiny_qwen3_omni", "default_cache_dir"]
