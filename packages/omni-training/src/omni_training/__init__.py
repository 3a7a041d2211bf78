"""Algorithm-agnostic training pieces: policy losses, advantage estimators, KL, the actor
(LoRA or full-parameter), rollout-vs-actor consistency metrics, and checkpoints.

Model specifics come only through an ``omni_contracts.TrainingAdapter``.
"""
