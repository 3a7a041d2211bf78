"""An offline tiny Qwen2.5-Omni checkpoint for tests and laptops."""

from omni_qwen25.tiny.build import TinySpec, build_tiny_qwen25_omni

__all__ = ["TinySpec", "build_tiny_qwen25_omni"]
