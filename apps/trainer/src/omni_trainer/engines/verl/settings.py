"""What our modules inside verl's processes need to know, carried by one env variable.

verl builds its engines, rollout servers and agent loops from its own config; our
adapter choice (training stage, encoder freezing, rollout pipeline) has no verl key, so
the launcher puts it in ``OMNI_RL_VERL_SETTINGS`` (JSON) in the Ray runtime env, next to
``VERL_USE_EXTERNAL_MODULES``. Light: no verl, torch or Ray import.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from omni_trainer.config import Config
from omni_verl_cpu import ROLLOUT_NAME as LOCAL_ROLLOUT_NAME

SETTINGS_ENV = "OMNI_RL_VERL_SETTINGS"
EXTERNAL_MODULES_ENV = "VERL_USE_EXTERNAL_MODULES"
EXTERNAL_MODULE = "omni_trainer.engines.verl.external"
VERL_OMNI_MODULE = "verl_omni"
"""verl-omni's external module, which its launchers export; omni-rl's own takes its place."""
OMNI_MODEL_TYPE = "omni_language_model"
"""verl ``model_type`` our training engine is registered under (verl's own is ``language_model``)."""
ROLLOUT_NAME = "vllm_omni"
CPU_PLATFORM_ENV = "VERL_PLATFORM"
"""verl reads its platform's name from this variable (``cpu``: :mod:`omni_verl_cpu.platform`)."""
AGENT_LOOP_MANAGER = "omni_trainer.engines.verl.agent_loop.OmniAgentLoopManager"
"""``actor_rollout_ref.rollout.agent.agent_loop_manager_class``: verl's hook for the class that
starts the agent-loop workers."""
REPLAY_BUFFER = ("pkg://omni_trainer.engines.verl.agent_loop", "RewardCheckedReplayBuffer")
"""``trainer.v1.sampler.custom_sampler.{path,name}``: verl's hook for the replay buffer its
trainer samples each step's batch from (ours checks ``reward.max_error_rate`` there)."""
BATCH_AGENT_LOOP_MANAGER = "omni_trainer.engines.verl.agent_loop.OmniBatchAgentLoopManager"
"""The agent-loop manager of verl's one-step-off trainer, which takes each batch back whole
(verl's legacy ``generate_sequences``; its V1 trainer reads batches from TransferQueue)."""
AGENT_LOOPS = {"single_turn_agent": "single_turn_agent"}
"""Our agent-loop names -> verl's agent loops (they get the adapter's processor from
:class:`~omni_trainer.engines.verl.agent_loop.OmniAgentLoopManager`'s workers)."""
SPEECH_AGENT_LOOP = "omni_speech_agent"
"""The verl agent loop of a speech stage (``actor_rollout_ref.model.stage=talker``):
:class:`~omni_trainer.engines.verl.agent_loop.OmniSpeechAgentLoop`."""
TRAINER_MODE = "omni_sync"
"""verl's ``trainer.v1.trainer_mode`` of a synchronous run: our trainer (``engines/verl/trainer.py``)."""


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
    on more than this share of its samples (:mod:`omni_trainer.reward_guard`)."""
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


def external_modules(exported: str | None) -> tuple[str, list[str]]:
    """``VERL_USE_EXTERNAL_MODULES`` for a run, given the user's exported value: our module
    first, then each of the user's other modules; verl-omni's (:data:`VERL_OMNI_MODULE`, which
    its launchers export) is not one of them. Returns the value and the notes to print.

    Raises:
        ValueError: a module the user exported is not installed (verl would stop on it in
            every process).
    """
    kept, notes = [EXTERNAL_MODULE], []
    for module in (m.strip() for m in (exported or "").split(",")):
        if not module or module in kept:
            continue
        if module == VERL_OMNI_MODULE or module.startswith(VERL_OMNI_MODULE + "."):
            notes.append(f"{EXTERNAL_MODULES_ENV}={module} (verl-omni's launchers export it) is replaced by omni-rl's "
                         f"own module, {EXTERNAL_MODULE}: verl-omni is not needed")
            continue
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a missing parent package
            found = False
        if not found:
            raise ValueError(f"{EXTERNAL_MODULES_ENV} names {module!r}, which is not installed here; verl imports it "
                             f"in every process. Install it, or drop it from {EXTERNAL_MODULES_ENV} (omni-rl adds "
                             "its own module itself)")
        kept.append(module)
    return ",".join(kept), notes


def adopt_external_modules() -> list[str]:
    """Set this process's ``VERL_USE_EXTERNAL_MODULES`` to the run's (:func:`external_modules`)
    before anything imports verl, which imports them at once; returns the notes to print.

    Raises:
        ValueError: see :func:`external_modules`.
    """
    value, notes = external_modules(os.environ.get(EXTERNAL_MODULES_ENV))
    os.environ[EXTERNAL_MODULES_ENV] = value
    return notes


TALKER_ROLLOUT_DTYPES = ("bfloat16", "bf16")
"""The rollout dtypes vLLM-Omni's Qwen3-Omni talker runs in (its prefill is bfloat16 whatever the
engine's dtype, ``qwen3_omni.py`` ``talker_preprocess_prefill``); a CPU talker run defaults to it."""


def cpu_rollout_name(config: Config) -> str:
    """The rollout a CPU run serves: the one the overrides named, else ``omni_local``. A run
    never switches engine with what happens to be installed: the real vLLM-Omni is named."""
    if "actor_rollout_ref.rollout.name" in config.given_keys:
        return config.actor_rollout_ref.rollout.name
    return LOCAL_ROLLOUT_NAME
