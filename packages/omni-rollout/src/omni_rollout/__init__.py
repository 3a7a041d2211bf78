"""Rollout for omni-rl: the local generation engine, agent loops, and (gpu extra) the
vLLM-Omni backend and its memory planner. Produces ``omni_contracts.RolloutSample``s through
a model's rollout adapter."""
