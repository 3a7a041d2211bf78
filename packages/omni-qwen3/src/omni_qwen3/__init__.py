"""Qwen3-Omni training and rollout adapters and the offline tiny model (not built yet)."""
