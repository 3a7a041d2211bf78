"""Dataset converters and the multimodal RL dataset (not built yet)."""
