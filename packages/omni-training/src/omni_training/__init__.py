"""Policy losses, advantage estimators, the actor, metrics and checkpoints (not built yet)."""
