"""verl's agent-loop workers with the training adapter's processor, and the speech agent loop.

verl's ``AgentLoopWorker`` takes its processor from ``HFModelConfig``, which is ``None``
for Qwen3-Omni (see :mod:`omni_verl.processor`), and it is that worker's
processor -- not the agent loop's -- that builds the actor's batch: ``multi_modal_inputs``
(pixel values, audio features) and the mrope ``position_ids``. The worker class is chosen
through verl's documented hook, ``actor_rollout_ref.rollout.agent.agent_loop_manager_class``:
:class:`OmniAgentLoopManager` starts :class:`OmniAgentLoopWorkerTQ` (verl's V1/TransferQueue
worker) with the adapter's processor installed; the agent loops it instantiates receive the
same processor, so templating, tokenization and positions agree with the local engine.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar
from uuid import uuid4

import ray
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopManager,
    AgentLoopMetrics,
    AgentLoopOutput,
    AgentLoopWorker,
    register,
)
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
from verl.utils.ray_utils import auto_await

from omni_rewards.audio import WeightedAudioReward
from omni_training.run_guards import StepFailureWatch, StepTally, check_reward_failures, count_sample
from omni_verl.compat import AfterPostprocess, ray_actor_class
from omni_verl.processor import adapter_processor
from omni_verl.settings import SPEECH_AGENT_LOOP, VerlSettings
from omni_contracts.speech import SOURCE_TRUNCATED
from omni_rollout.speech_sample import SPEECH_SAMPLE
from omni_verl.speech_reward import score_speech


class AdapterProcessorMixin:
    """Replace the worker's processor with the adapter's, before any rollout runs."""

    processor: Any
    model_config: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        processor = adapter_processor(VerlSettings.from_env())
        self.processor = processor
        self.model_config.processor = processor


class OmniAgentLoopWorker(AdapterProcessorMixin, AgentLoopWorker):
    """verl's batch-returning worker (legacy trainer, and the CPU harness) with our processor."""


class RewardTallyMixin(AfterPostprocess):
    """Tallies each training step's scored samples and scorer failures (``reward.max_error_rate``);
    the manager collects them with :meth:`take_reward_tallies`."""

    _reward_tallies: dict[int, StepTally]

    def after_postprocess(self, outputs: list[Any], validate: bool, sample: dict[str, Any]) -> None:
        if validate:
            return
        info = outputs[-1].extra_fields.get("reward_extra_info") or {}
        count_sample(self.__dict__.setdefault("_reward_tallies", {}), int(sample["global_steps"]), info,
                     str(sample.get("data_source") or ""))

    def take_reward_tallies(self) -> dict[int, StepTally]:
        """The tallies since the last call (then forgotten here)."""
        tallies = self.__dict__.get("_reward_tallies", {})
        self._reward_tallies = {}
        return tallies


class OmniAgentLoopWorkerTQ(RewardTallyMixin, AdapterProcessorMixin, ray_actor_class(AgentLoopWorkerTQ)):  # type: ignore[misc]
    """verl's V1 worker (outputs go to TransferQueue) with our processor, tallying scorer failures."""


class OmniAgentLoopManager(AgentLoopManagerTQ):
    """verl's V1 agent-loop manager, starting :class:`OmniAgentLoopWorkerTQ` workers. It keeps
    the scorer-failure tallies of ``reward.max_error_rate``, which
    :class:`RewardCheckedReplayBuffer` checks as the trainer takes each step's batch.

    One manager serves the trainer in its process (verl's task runner); :attr:`running` is it.
    """

    running: ClassVar[OmniAgentLoopManager | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agent_loop_workers_class = ray.remote(OmniAgentLoopWorkerTQ)
        self.reward_watch: StepFailureWatch | None = None
        OmniAgentLoopManager.running = self

    def check_rewards(self) -> None:
        """Collect the workers' tallies and check them.

        Raises:
            RewardFailureError: a step's scorer failed on more than ``reward.max_error_rate``.
        """
        config = self.config
        if self.reward_watch is None:
            self.reward_watch = StepFailureWatch(
                config.data.train_batch_size * config.actor_rollout_ref.rollout.n,
                VerlSettings.from_env().reward_max_error_rate,
            )
        workers: list[Any] = list(self.agent_loop_workers)  # Ray handles of OmniAgentLoopWorkerTQ
        for tallies in ray.get([worker.take_reward_tallies.remote() for worker in workers]):
            self.reward_watch.add(tallies)
        self.reward_watch.check(run_dir=str(config.trainer.default_local_dir))

    def reward_metrics(self, step: int) -> dict[str, float]:
        """Step ``step``'s failed samples (``reward/errors``, ``reward/timeouts``) and the means of
        the fields its scorers returned (``reward/<data_source>/<field>/mean``), as the local
        engine logs them; verl's own metrics carry the score only."""
        return self.reward_watch.take_metrics(step) if self.reward_watch is not None else {}


class OmniBatchAgentLoopManager(AgentLoopManager):
    """verl's batch-returning agent-loop manager, which its one-step-off trainer drives, starting
    :class:`OmniAgentLoopWorker` workers. Each training batch it returns has been scored; the
    run stops there if the scorer failed on more than ``reward.max_error_rate`` of it.

    The one-step-off trainer draws the first batch (of a launch) for the step it trains,
    labelled with that step (``global_steps``), and every later one while the step before it
    trains, labelled with that step. A failure names the step that would have trained on the
    batch.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agent_loop_workers_class = ray.remote(OmniAgentLoopWorker)
        self._drawn = False

    @auto_await  # as verl's: its validation calls this without await, from inside its event loop
    async def generate_sequences(self, prompts: Any) -> Any:
        output = await super().generate_sequences(prompts)
        if not prompts.meta_info.get("validate", False):
            label = int(prompts.meta_info.get("global_steps", 0))
            step = label + 1 if self._drawn else label
            check_batch_rewards(step, output.non_tensor_batch, str(self.config.trainer.default_local_dir))
            self._drawn = True
        return output


def check_batch_rewards(step: int, columns: dict[str, Any], run_dir: str) -> None:
    """Tally and check one training batch's ``reward_<status>`` columns (the non-tensor batch
    verl's batch-returning agent-loop workers give back).

    Raises:
        RewardFailureError: the scorer failed on more than ``reward.max_error_rate`` of it.
    """
    rows = len(next(iter(columns.values()), ()))
    keys = [key for key in columns if key.startswith("reward_")]
    tallies: dict[int, StepTally] = {}
    for i in range(rows):
        count_sample(tallies, step, {key: columns[key][i] for key in keys})
    tally = tallies.get(step, StepTally())
    check_reward_failures(step, tally.failed, tally.total, VerlSettings.from_env().reward_max_error_rate, tally.reasons,
                          run_dir=run_dir)


class RewardCheckedReplayBuffer(ReplayBuffer):
    """verl's synchronous replay buffer (``trainer.v1.sampler.custom_sampler``, verl's hook for
    it): once a step's training batch is sampled, every sample in it has been scored, and the
    run stops there if the scorer failed on more than ``reward.max_error_rate`` of them, before
    the policy is updated on their zeros (the last step included)."""

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Any, dict[str, Any]]:
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        # A prompt is sampled only once all its sessions finished, our tally included
        # (verl writes its terminal status after they settle).
        manager = OmniAgentLoopManager.running
        if partition_id == "train" and manager is not None:
            manager.check_rewards()
            metrics = {**metrics, **manager.reward_metrics(global_steps)}
        return batch, metrics


@register(SPEECH_AGENT_LOOP)
class OmniSpeechAgentLoop(AgentLoopBase):
    """One prompt, one spoken response, for a speech policy stage (a talker).

    The thinker's chat prompt goes to the server as in verl's single-turn loop; the server
    answers with the policy stage's tokens and log-probs, and under :data:`SPEECH_SAMPLE` the
    sample the rollout adapter built from every stage's output (see
    :mod:`omni_qwen3.talker_outputs`). The training row is that sample: its prompt (the
    talker's prefill placeholder), its codec tokens, and its namespaced fields as
    ``extra_fields``, which verl batches as non-tensor entries for the actor's forward. The
    loop scores the waveform with ``reward.audio_rewards`` against the text spoken and the
    row's ground truth (``reward_score``; the per-reward values and the ``reward_<status>``
    counts as ``reward_extra_info``), so verl's text reward function never sees the row. The
    response mask is the rollout adapter's: a sample it keeps out of training (the text it
    spoke was cut at the length limit) has every token masked and counts in
    ``reward_extra_info["source_truncated"]``.
    Text prompts only: the talker's conditioning is rebuilt from the thinker sequence.
    """

    _rewards: ClassVar[dict[str, WeightedAudioReward]] = {}

    @classmethod
    def speech_rewards(cls) -> WeightedAudioReward:
        """``reward.audio_rewards`` (exported in the settings), built once per process.

        Raises:
            ValueError: the run has no audio rewards.
        """
        specs = VerlSettings.from_env().audio_rewards
        if not specs:
            raise ValueError("A speech run needs reward.audio_rewards, e.g. [{name: duration, weight: 1.0}].")
        key = json.dumps(specs, sort_keys=True)
        if key not in cls._rewards:
            cls._rewards[key] = WeightedAudioReward(specs)
        return cls._rewards[key]

    async def run(self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any) -> AgentLoopOutput:
        messages = list(kwargs["raw_prompt"])
        rewards = self.speech_rewards()
        media = await self.process_multi_modal_info(messages)
        if any(media.values()):
            raise ValueError(
                f"A speech row holds media ({', '.join(k for k, v in media.items() if v)}); the verl engine's "
                "speech rollout takes text prompts only (the talker's conditioning is rebuilt from the text)."
            )
        prompt_ids = await self.ct_build_initial_tokens(messages, mm_inputs_out={})
        output = await self.server_manager.generate(
            request_id=uuid4().hex, prompt_ids=prompt_ids, sampling_params=sampling_params, priority=int(priority)
        )
        extra = dict(output.extra_fields)
        sample = extra.pop(SPEECH_SAMPLE, None)
        if sample is None:
            if output.stop_reason == "aborted":
                raise RuntimeError(
                    "A speech request was aborted: it has no talker fields to train on. The verl engine's "
                    "synchronous rollout finishes every request before it pauses; partial or asynchronous "
                    "rollouts are not supported for a speech stage."
                )
            raise RuntimeError(
                f"The rollout server returned no {SPEECH_SAMPLE!r}; it serves a speech stage only in a speech "
                "pipeline mode (actor_rollout_ref.rollout.pipeline_mode)."
            )
        response = list(output.token_ids)
        if len(response) > self.rollout_config.response_length:
            raise ValueError(
                f"The server returned {len(response)} speech tokens for a response length of "
                f"{self.rollout_config.response_length}; its max_tokens must be the response length."
            )
        tokenizer: Any = self.tokenizer
        text = tokenizer.decode(list(sample["spoken_ids"] or []), skip_special_tokens=True)
        ground_truth = (kwargs.get("reward_model") or {}).get("ground_truth")
        score, info = await asyncio.to_thread(
            score_speech, rewards, sample["waveform"], sample["sample_rate"], text,
            None if ground_truth is None else str(ground_truth),
        )
        info[SOURCE_TRUNCATED] = float(sample[SOURCE_TRUNCATED])
        return AgentLoopOutput(
            prompt_ids=list(sample["prompt_ids"]),
            response_ids=response,
            response_mask=list(sample["response_mask"]),
            response_logprobs=list(output.log_probs) if output.log_probs is not None else None,
            reward_score=score,
            num_turns=2,
            metrics=AgentLoopMetrics(num_preempted=output.num_preempted if output.num_preempted is not None else -1),
            extra_fields={**extra, **sample["fields"], "reward_extra_info": info},
        )
