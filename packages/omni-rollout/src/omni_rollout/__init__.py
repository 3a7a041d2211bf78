"""Rollout engines (local generate, vLLM-Omni), agent loops and deploy configs (not built yet)."""
