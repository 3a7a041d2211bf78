"""The verl engine's half of each task (:func:`omni_trainer.tasks.task_name`): what it refuses
before Ray starts, the agent loop that samples it, and whether it runs verl's trainer or, with no
rollout, drives verl's actor workers itself (:mod:`omni_trainer.engines.verl.preference`).
A new task that runs on verl adds its entry to :data:`VERL_TASKS`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from omni_contracts import OmniContractError, rollout_adapters

from omni_trainer.config import Config
from omni_trainer.tasks import DISTILLATION, PREFERENCE, SPEECH_RL, TEXT_RL, task_name
from omni_verl.settings import ROLLOUT_NAME, SPEECH_AGENT_LOOP
from omni_verl_cpu import ROLLOUT_NAME as LOCAL_ROLLOUT_NAME

TALKER_ROLLOUT_DTYPES = ("bfloat16", "bf16")
"""The rollout dtypes vLLM-Omni's Qwen3-Omni talker runs in (its prefill is bfloat16 whatever the
engine's dtype, ``qwen3_omni.py`` ``talker_preprocess_prefill``); a CPU talker run defaults to it."""


def cpu_rollout_name(config: Config) -> str:
    """The rollout a CPU run serves: the one the overrides named, else ``omni_local``. A run
    never switches engine with what happens to be installed: the real vLLM-Omni is named."""
    if "actor_rollout_ref.rollout.name" in config.given_keys:
        return config.actor_rollout_ref.rollout.name
    return LOCAL_ROLLOUT_NAME


def preference_problems(config: Config) -> list[str]:
    """Why an offline preference run cannot be split as configured over verl's ranks: verl
    gives each rank an equal share of whole pairs, and each update an equal share of its
    rank's pairs, ``ppo_micro_batch_size_per_gpu`` pairs a micro-batch (at most all of them)."""
    actor, ranks = config.actor_rollout_ref.actor, config.trainer.nnodes * config.trainer.n_gpus_per_node
    batch, mini, micro = config.data.train_batch_size, actor.ppo_mini_batch_size, actor.ppo_micro_batch_size_per_gpu
    problems = []
    if mini <= batch and batch % mini:  # a larger mini-batch is refused by the common checks
        problems.append(f"data.train_batch_size={batch} is not a multiple of actor_rollout_ref.actor.ppo_mini_batch_size="
                        f"{mini} (pairs per optimizer step); every update takes the same number of pairs")
    if mini % ranks:
        problems.append(f"actor_rollout_ref.actor.ppo_mini_batch_size={mini} pairs do not split evenly over the {ranks} "
                        "ranks of trainer.nnodes x trainer.n_gpus_per_node")
    elif not actor.use_dynamic_bsz and micro < mini // ranks and (mini // ranks) % micro:
        problems.append(f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro} pairs do not divide the {mini // ranks} "
                        f"pairs each rank takes per update (ppo_mini_batch_size={mini} over {ranks} ranks)")
    return problems


def speech_problems(config: Config) -> list[str]:
    """Why a talker run (``stage=talker``) cannot run on verl as configured.

    On verl the talker speaks what vLLM-Omni's thinker answers (greedy, its production
    sampling), in the checkpoint's default voice, and its rows are padded (the talker's
    fields are per row)."""
    model = config.actor_rollout_ref.model
    rollout = config.actor_rollout_ref.rollout
    problems = []
    try:
        adapter = rollout_adapters.get(rollout.pipeline() or "")()
    except OmniContractError:
        adapter = None  # the pipeline check names the problem
    if adapter is not None and rollout.pipeline_mode in adapter.modes and adapter.policy_stage_id(rollout.pipeline_mode) == 0:
        speech_modes = [m for m in adapter.modes if adapter.policy_stage_id(m) != 0]
        problems.append(
            f"actor_rollout_ref.model.stage=talker samples the talker in vLLM-Omni, but pipeline_mode="
            f"{rollout.pipeline_mode!r} samples stage 0; set actor_rollout_ref.rollout.pipeline_mode to one of "
            f"{', '.join(speech_modes) or '(none: this pipeline has no speech policy mode)'}"
        )
    if model.use_remove_padding:
        problems.append(
            "actor_rollout_ref.model.stage=talker reads per-row fields, which packed rows cannot carry; set "
            "actor_rollout_ref.model.use_remove_padding=false"
        )
    served = cpu_rollout_name(config) if config.trainer.device == "cpu" else rollout.name
    if served == ROLLOUT_NAME and rollout.dtype not in (None, *TALKER_ROLLOUT_DTYPES):
        problems.append(
            f"actor_rollout_ref.model.stage=talker: actor_rollout_ref.rollout.dtype={rollout.dtype}, but vLLM-Omni builds "
            "the talker's prefill in bfloat16 whatever the engine's dtype (its Qwen3-Omni talker_preprocess_prefill), "
            "and any other dtype stops the talker at its first request; leave it unset (bfloat16)"
        )
    if config.data.spoken_text != "thinker":
        problems.append(
            "actor_rollout_ref.model.stage=talker speaks vLLM-Omni's thinker's own answer on the verl engine "
            "(extra_info.spoken_text is for the local engine); set data.spoken_text=thinker"
        )
    if config.trainer.device != "cpu" and config.data.max_spoken_tokens != type(config.data)().max_spoken_tokens:
        problems.append(
            "data.max_spoken_tokens applies to the local engine and omni_local; on verl the thinker answers with vLLM-Omni's "
            "production sampling (greedy, at most 2048 tokens); leave it unset"
        )
    if rollout.speaker is not None:
        problems.append(
            "actor_rollout_ref.rollout.speaker: vLLM-Omni's talker speaks with the checkpoint's default voice "
            "on the verl engine in this version; leave it unset"
        )
    return problems


def soundtrack_problems(config: Config) -> list[str]:
    """``data.use_audio_in_video`` on a vLLM-Omni pipeline that cannot lay soundtracks out
    (:attr:`omni_contracts.RolloutAdapter.interleaves_soundtracks`); ``omni_local`` can."""
    rollout = config.actor_rollout_ref.rollout
    served = cpu_rollout_name(config) if config.trainer.device == "cpu" else rollout.name
    if not config.data.use_audio_in_video or served != ROLLOUT_NAME:
        return []
    try:
        adapter = rollout_adapters.get(rollout.pipeline() or "")
    except OmniContractError:
        return []  # the pipeline check names the problem
    if not adapter.interleaves_soundtracks:
        return [f"data.use_audio_in_video=true: vLLM-Omni's {rollout.pipeline()} pipeline does not lay a video's "
                "soundtrack out among its frames in this version; train on the CPU with "
                f"actor_rollout_ref.rollout.name={LOCAL_ROLLOUT_NAME}, or on the local engine"]
    allowed = os.environ.get("VLLM_PLUGINS")
    left_out = [name for name in adapter.vllm_plugins if allowed is not None and name not in allowed.split(",")]
    return [f"VLLM_PLUGINS={allowed} leaves out {', '.join(left_out)}, which vLLM-Omni's {rollout.pipeline()} "
            "pipeline needs to place a video's soundtrack as the actor does; add it to VLLM_PLUGINS, or unset it"
            ] if left_out else []


@dataclass(frozen=True)
class VerlTask:
    problems: Callable[[Config], list[str]] = soundtrack_problems
    """Why the run cannot go to verl as configured (part of the pre-flight)."""
    agent_loop: str | None = None
    """verl's agent loop for the run; ``None``: ``actor_rollout_ref.rollout.agent.default_agent_loop``'s."""
    offline: bool = False
    """No rollout: verl's actor workers alone, driven from the launching process."""


VERL_TASKS = {
    TEXT_RL: VerlTask(),
    DISTILLATION: VerlTask(),  # the teacher is verl's own (distillation.enabled; engines/verl/distillation.py)
    SPEECH_RL: VerlTask(speech_problems, agent_loop=SPEECH_AGENT_LOOP),
    PREFERENCE: VerlTask(preference_problems, offline=True),
}


def verl_task(config: Config) -> VerlTask:
    return VERL_TASKS[task_name(config)]
