"""An offline tiny Qwen2.5-Omni checkpoint for tests and laptops."""

from omni_model_kit.tiny import TinySpec
from omni_qwen25.tiny.build import build_tiny_qwen25_omni

__all__ = ["TinySpec", "build_tiny_qwen25_omni"]
