"""What the CPU rollout serves: the run's policy, given to its servers through one env variable.

verl builds each replica from its rollout config and the model's path; the stage, the
encoders' freezing and the rollout pipeline have no verl key, so the launcher exports them as
:class:`CpuPolicy` (JSON in ``OMNI_VERL_CPU_POLICY``, in the Ray runtime env). Light: no verl,
torch or Ray import.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from omni_contracts import RolloutAdapter, TrainingAdapter, get_rollout_adapter, load_processor, resolve_training_adapter

POLICY_ENV = "OMNI_VERL_CPU_POLICY"


@dataclass(frozen=True)
class CpuPolicy:
    model_path: str
    stage: str = "thinker"
    adapter_options: dict[str, Any] = field(default_factory=dict, hash=False)
    """The options the training adapter declares (``TrainingAdapter.options``): encoder freezing."""
    pipeline_name: str = "qwen3_omni_moe"
    pipeline_mode: str = "thinker_only"
    max_spoken_tokens: int = 64
    """A speech stage's thinker answer budget (vLLM-Omni's thinker answers with its own sampling)."""

    def to_env(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls) -> CpuPolicy:
        """The policy the launcher exported.

        Raises:
            RuntimeError: the variable is missing (the process was not started by a launcher
                that serves ``omni_local``, or the runtime env did not reach it).
        """
        raw = os.environ.get(POLICY_ENV)
        if not raw:
            raise RuntimeError(
                f"{POLICY_ENV} is not set in this process: the omni_local rollout serves the policy its launcher "
                "exports (`uv run trainer trainer.engine=verl trainer.device=cpu ...` puts it in "
                "ray_kwargs.ray_init.runtime_env.env_vars)."
            )
        return cls(**json.loads(raw))

    def training_adapter(self, hf_config: Any) -> TrainingAdapter:
        """The adapter for the checkpoint's ``architectures[0]`` and the stage, with its options."""
        return resolve_training_adapter(hf_config, self.stage, self.adapter_options)

    def rollout_adapter(self) -> RolloutAdapter:
        adapter = get_rollout_adapter(self.pipeline_name)
        adapter.check_mode(self.pipeline_mode)
        return adapter

    def processor(self, hf_config: Any) -> Any:
        """The training adapter's processor, as the actor's: the rollout computes the same features."""
        return load_processor(self.training_adapter(hf_config), self.model_path, hf_config)
