"""Reward scorers, the reward manager and the HTTP scorer client (not built yet)."""
