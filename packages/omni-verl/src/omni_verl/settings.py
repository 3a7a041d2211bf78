"""The names a launcher writes into verl's config, and what our modules inside verl's processes
need to know, carried by one env variable.

verl builds its engines, rollout servers and agent loops from its own config; our
adapter choice (training stage, encoder freezing, rollout pipeline) has no verl key, so
the launcher puts it in ``OMNI_RL_VERL_SETTINGS`` (JSON) in the Ray runtime env, next to
``VERL_USE_EXTERNAL_MODULES``. Light: no verl, torch or Ray import.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from typing import Any

SETTINGS_ENV = "OMNI_RL_VERL_SETTINGS"
EXTERNAL_MODULE = "omni_verl.external"
"""The module verl imports in every process (``VERL_USE_EXTERNAL_MODULES``): it registers the rest."""
OMNI_MODEL_TYPE = "omni_language_model"
"""verl ``model_type`` our training engine is registered under (verl's own is ``language_model``)."""
ROLLOUT_NAME = "vllm_omni"
CPU_PLATFORM_ENV = "VERL_PLATFORM"
"""verl reads its platform's name from this variable (``cpu``: :mod:`omni_verl_cpu.platform`)."""
AGENT_LOOP_MANAGER = "omni_verl.agent_loop.OmniAgentLoopManager"
"""``actor_rollout_ref.rollout.agent.agent_loop_manager_class``: verl's hook for the class that
starts the agent-loop workers."""
REPLAY_BUFFER = ("pkg://omni_verl.agent_loop", "RewardCheckedReplayBuffer")
"""``trainer.v1.sampler.custom_sampler.{path,name}``: verl's hook for the replay buffer its
trainer samples each step's batch from (ours checks ``reward.max_error_rate`` there)."""
BATCH_AGENT_LOOP_MANAGER = "omni_verl.agent_loop.OmniBatchAgentLoopManager"
"""The agent-loop manager of verl's one-step-off trainer, which takes each batch back whole
(verl's legacy ``generate_sequences``; its V1 trainer reads batches from TransferQueue)."""
AGENT_LOOPS = {"single_turn_agent": "single_turn_agent"}
"""Our agent-loop names -> verl's agent loops (they get the adapter's processor from
:class:`~omni_verl.agent_loop.OmniAgentLoopManager`'s workers)."""
SPEECH_AGENT_LOOP = "omni_speech_agent"
"""The verl agent loop of a speech stage (``actor_rollout_ref.model.stage=talker``):
:class:`~omni_verl.agent_loop.OmniSpeechAgentLoop`."""
DATASET_CLASS = ("pkg://omni_verl.dataset", "OmniRLHFDataset")
"""``data.custom_cls.{path,name}``: the dataset class verl loads."""
REWARD_FUNCTION = ("pkg://omni_verl.reward", "compute_score")
"""``reward.custom_reward_function.{path,name}``: the reward function verl loads."""
TRAINER_MODE = "omni_sync"
"""verl's ``trainer.v1.trainer_mode`` of a synchronous run: our trainer (:mod:`omni_verl.trainer`)."""


@dataclass(frozen=True)
class VerlSettings:
    model_path: str
    stage: str = "thinker"
    freeze_vision_tower: bool = True
    freeze_audio_tower: bool = True
    pipeline_name: str = "qwen3_omni_moe"
    pipeline_mode: str = "thinker_only"
    audio_rewards_json: str = "[]"
    """``reward.audio_rewards`` as JSON (the settings stay hashable): a speech stage's rewards,
    scored in its agent loop."""
    lora_dtype: str | None = None
    """``actor_rollout_ref.model.lora_dtype`` (verl-omni's key, not verl's): the dtype our FSDP
    engine casts the LoRA parameters to once verl has built them; ``None``: the base's."""
    reward_max_error_rate: float = 0.5
    """``reward.max_error_rate``: our agent-loop manager stops the run when a step's scorer failed
    on more than this share of its samples (:mod:`omni_training.run_guards`)."""
    max_spoken_tokens: int = 64
    """``data.max_spoken_tokens``: the thinker's answer budget when ``omni_local`` serves a speech
    stage (vLLM-Omni's thinker answers with its own production sampling)."""

    @property
    def audio_rewards(self) -> list[dict[str, Any]]:
        rewards: list[dict[str, Any]] = json.loads(self.audio_rewards_json)
        return rewards

    def to_env(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls) -> VerlSettings:
        """The settings the launcher exported.

        Raises:
            RuntimeError: the variable is missing (the process was not started by
                ``trainer.engine=verl``, or the runtime env did not reach it).
        """
        raw = os.environ.get(SETTINGS_ENV)
        if not raw:
            raise RuntimeError(
                f"{SETTINGS_ENV} is not set in this process. omni-rl's verl modules run only in a "
                "job started by `uv run trainer trainer.engine=verl ...`, which exports it to every "
                "Ray worker through ray_kwargs.ray_init.runtime_env.env_vars."
            )
        return cls(**json.loads(raw))


def staleness_bound(interval: int, threshold: float) -> int:
    """The most updates a fully-async sample may lag behind the policy that trains on it:
    T + ceil((1 + s) * T) - 1 for a sync every T steps and verl's ``staleness_threshold`` s
    (derived in ``omni_trainer.engines.verl.async_training``)."""
    return interval + math.ceil((1 + threshold) * interval) - 1
