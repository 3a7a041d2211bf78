"""A CPU rollout backend for verl: ``actor_rollout_ref.rollout.name=omni_local``.

verl's trainer samples through rollout replicas (``RolloutReplicaRegistry``), each a
server reached by token-in/token-out ``generate`` calls from verl's agent loops, and it
updates their weights from the actor every step (``CheckpointEngineManager.update_weights``
-> each actor rank's ``update_weights`` -> the worker-side rollout's ``update_weights``).
This module is such a backend, with the local engine's generation instead of vLLM's:

- :class:`LocalRolloutServer`: one Ray actor per replica holding the policy (loaded as the
  actor loads it), sampling with :class:`~omni_rollout.local_engine.LocalEngine` -- the same
  sampler, the same banned placeholders, log-probs of the processed distribution. Requests
  that arrive together are batched into one ``generate`` call per sampling setting.
- :class:`LocalRolloutReplica`: places that server on the node of its training rank.
- :class:`LocalRolloutWorkerAdapter`: the worker-side half verl builds in every actor
  rank; it sends the actor's weights (verl's ``get_per_tensor_param`` stream, LoRA merged)
  to its replica's server through Ray's object store. With the rollout on ranks of its own
  (one-step-off), verl builds it in the replica's ``CheckpointEngineWorker`` instead, which
  hands it what the checkpoint engine received (:mod:`omni_verl_cpu.gloo_checkpoint`).

A judge replica (verl's generative reward model, ``reward.reward_model.enable``:
``RewardModelManager`` builds one per ``rollout_world_size`` of the judge's pool, with
``is_reward_model``) serves the judge checkpoint over HTTP as
:class:`~omni_rollout.chat_server.ChatServer`, the OpenAI-compatible ``/v1/chat/completions``
the local engine serves its judge with; verl's router proxies the user's reward function to it
(``reward_router_address``), as it proxies to a vLLM server's on GPUs.

A teacher replica (on-policy distillation: verl's ``TeacherModelManager`` builds one per
teacher slot of ``distillation.nnodes`` x ``distillation.n_gpus_per_node``) holds the
teacher checkpoint as the local engine's :class:`~omni_training.distillation.Teacher` and
answers verl's teacher requests (``max_tokens=1`` with ``prompt_logprobs``): the teacher's
log-prob of every token of the student's prompt + response, in vLLM's layout
(:func:`prompt_log_probs`).

Media: verl's agent loop sends the prompt's decoded images, videos and audios with the
token ids; the server computes their features with the adapter's processor exactly as
verl's agent-loop worker computes the actor's (``_compute_multi_modal_inputs``), so the
rollout and the actor see the same features.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutMode, RolloutReplica, TokenOutput
from verl.workers.rollout.utils import ensure_async_iterator

from omni_rollout.chat_server import ChatServerSettings
from omni_rollout.local_engine import LocalEngine, find_policy_module
from omni_rollout.placeholders import policy_logit_mask
from omni_rollout.sampling import SamplingSettings
from omni_training.logit_mask import mask_policy_logits, masked_ids
from omni_verl_cpu import ROLLOUT_NAME
from omni_verl_cpu.policy import CpuPolicy
from omni_verl_cpu.speech import LocalSpeaker, speech_settings

logger = logging.getLogger(__name__)

BATCH_WINDOW_S = 0.05
"""How long the server waits after a request for others to join its ``generate`` call
(verl's agent loop sends each sample as its own request, all at once)."""
UNSUPPORTED_SAMPLING = {"repetition_penalty": 1.0, "ignore_eos": False}
"""verl sampling options the local engine takes at their neutral value only: anything else
would change what is sampled without the actor knowing (or ask for what it cannot return)."""


@dataclass
class _Request:
    inputs: dict[str, Any]
    settings: SamplingSettings
    done: asyncio.Future[Any] = field(repr=False)
    version: int | None = None
    """The step of the weights that sampled it (set as its batch starts)."""


def sampling_settings(sampling_params: dict[str, Any], max_tokens: int) -> SamplingSettings:
    """verl's per-request sampling dict -> the local engine's settings (one sample).

    Raises:
        ValueError: an option the local engine cannot honour is set (named, with its value).
    """
    params = dict(sampling_params)
    for key, neutral in UNSUPPORTED_SAMPLING.items():
        value = params.pop(key, neutral)
        if value != neutral:
            raise ValueError(
                f"rollout.name={ROLLOUT_NAME} samples with {key}={neutral!r} only (got {value!r}): the "
                "actor's log-probs would no longer be the policy's that sampled."
            )
    top_k = int(params.get("top_k", -1) or -1)
    return SamplingSettings(
        n=1,
        temperature=float(params.get("temperature", 1.0)),
        top_p=float(params.get("top_p", 1.0)),
        top_k=top_k if top_k > 0 else -1,
        max_new_tokens=max_tokens,
        stop_token_ids=tuple(int(t) for t in params.get("stop_token_ids") or ()),
        seed=None,
    )


def media_inputs(
    processor: Any,
    prompt_ids: list[int],
    images: list[Any] | None,
    videos: list[Any] | None,
    audios: list[Any] | None,
    mm_processor_kwargs: dict[str, Any] | None,
) -> dict[str, Any]:
    """The local engine's inputs for one prompt: ``input_ids`` ``[1, L]``, its mask, and the
    media features the adapter's processor computes from the prompt's decoded text and media,
    exactly as verl's agent-loop worker computes the actor's (``_compute_multi_modal_inputs``),
    and ``use_audio_in_video`` when the request's processor kwargs interleave soundtracks (the
    thinker's forward then lays the prompt out as the actor's positions do).
    """
    ids = torch.tensor([prompt_ids], dtype=torch.long)
    inputs: dict[str, Any] = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if not (images or videos or audios):
        return inputs
    from verl.utils.tokenizer import build_multimodal_processor_inputs, get_processor_token_id

    collapse = {t for t in (get_processor_token_id(processor, "image"), get_processor_token_id(processor, "video")) if t is not None}
    collapsed: list[int] = []
    for token in prompt_ids:
        if not (token in collapse and collapsed and collapsed[-1] == token):
            collapsed.append(token)
    text = processor.tokenizer.decode(collapsed, skip_special_tokens=True)
    features = dict(
        build_multimodal_processor_inputs(
            processor, text=[text], images=images, videos=videos, audio=audios, mm_processor_kwargs=mm_processor_kwargs
        ).convert_to_tensors("pt")
    )
    # The ids verl sent stay the prompt (the decoded text lost its special placeholders); the
    # model checks its placeholder count against these features in the forward.
    features.pop("input_ids")
    features.pop("attention_mask", None)
    if videos and (mm_processor_kwargs or {}).get("use_audio_in_video"):
        features["use_audio_in_video"] = True
    return {**inputs, **features}


EXPERT_KEY = re.compile(r"^(?P<base>.+\.mlp\.experts)\.(?P<expert>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)\.weight$")


def pack_experts(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """verl streams transformers 5's packed MoE experts as vLLM's per-expert keys
    (``unfuse_moe_params``); the local engine's model holds them packed
    (``experts.gate_up_proj [E, 2I, H]``, ``experts.down_proj [E, H, I]``). Pack them back.

    Raises:
        ValueError: an expert's projection is missing (a partial stream).
    """
    packed: dict[str, torch.Tensor] = {}
    experts: dict[str, dict[str, dict[int, torch.Tensor]]] = {}
    for name, tensor in weights.items():
        match = EXPERT_KEY.match(name)
        if match is None:
            packed[name] = tensor
            continue
        experts.setdefault(match["base"], {}).setdefault(match["proj"], {})[int(match["expert"])] = tensor
    for base, projections in experts.items():
        counts = {proj: len(rows) for proj, rows in projections.items()}
        count = max(counts.values())
        if set(counts) != {"gate_proj", "up_proj", "down_proj"} or any(
            sorted(rows) != list(range(count)) for rows in projections.values()
        ):
            raise ValueError(f"{base}: incomplete expert weights in the sync ({counts} of {count} experts).")
        stack = {proj: torch.stack([rows[i] for i in range(count)]) for proj, rows in projections.items()}
        packed[f"{base}.gate_up_proj"] = torch.cat([stack["gate_proj"], stack["up_proj"]], dim=1)
        packed[f"{base}.down_proj"] = stack["down_proj"]
    return packed


def weights_digest(weights: dict[str, torch.Tensor]) -> str:
    """A digest of named tensors' names, dtypes, shapes and bytes, in name order: equal digests
    mean the same weights, bit for bit (a resumed run's first sync against the killed run's)."""
    digest = hashlib.sha256()
    for name in sorted(weights):
        tensor = weights[name].detach().to("cpu").contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def prompt_log_probs(teacher: Any, inputs: dict[str, Any], num: int) -> tuple[list[list[int]], list[list[float]]]:
    """The teacher's log-probs of a sequence's own tokens, in the layout verl reads from a
    vLLM server's ``prompt_logprobs`` (``extract_prompt_logprobs``): row ``i`` scores token
    ``i + 1`` given the tokens before it -- the token itself for ``num=0``, else the teacher's
    top ``num`` tokens, best first -- and a last row of zeros, one row per token in all.

    The log-probs are the local engine's teacher's (:meth:`Teacher.score`: temperature 1,
    the unprocessed distribution), on the same inputs the student's actor sees.
    """
    from omni_training.batching import MicroBatch

    ids = inputs["input_ids"]
    if ids.shape[1] < 2:
        raise ValueError(f"prompt_logprobs needs a sequence of 2 tokens or more, got {ids.shape[1]}.")
    targets = ids[:, 1:]
    batch = MicroBatch(model_inputs=dict(inputs), responses=targets, response_mask=torch.ones_like(targets))
    (scored,) = teacher.score([batch], topk=num or None)
    if num:
        rows_ids, rows_lp = scored.topk_ids[0].tolist(), scored.topk_log_probs[0].tolist()
    else:
        rows_ids = [[token] for token in targets[0].tolist()]
        rows_lp = [[value] for value in scored.log_probs[0].tolist()]
    width = max(num, 1)
    return [*rows_ids, [0] * width], [*rows_lp, [0.0] * width]


MEDIA_CACHE_PROMPTS = 256
"""Prompts whose media features the server keeps (the most recent; a step's prompts fit)."""


def media_key(prompt_ids: list[int], *media: Any) -> str:
    """A digest of a request's prompt and media (their values, not their objects: each request
    arrives deserialized anew)."""
    digest = hashlib.sha256(repr(prompt_ids).encode())
    for value in media:
        _digest_into(digest, value)
    return digest.hexdigest()


def _digest_into(digest: Any, value: Any) -> None:
    if isinstance(value, (list, tuple)):
        digest.update(f"[{len(value)}".encode())
        for item in value:
            _digest_into(digest, item)
    elif isinstance(value, dict):
        for key in sorted(value):
            digest.update(repr(key).encode())
            _digest_into(digest, value[key])
    elif hasattr(value, "tobytes"):  # numpy arrays, PIL images
        digest.update(repr(getattr(value, "shape", getattr(value, "size", None))).encode())
        digest.update(value.tobytes())
    elif isinstance(value, torch.Tensor):
        digest.update(value.detach().cpu().numpy().tobytes())
    else:
        digest.update(repr(value).encode())


def judge_settings(config: Any, model_path: str, host: str) -> ChatServerSettings:
    """verl's ``reward.reward_model.rollout`` (a ``RolloutConfig``) -> the judge endpoint's
    settings: its dtype, lengths and batch, and the sampling a request that names none gets
    (``do_sample=false``: greedy); on this node's address, a free port."""
    return ChatServerSettings(
        model_path=model_path, device="cpu", dtype=str(config.dtype), prompt_length=int(config.prompt_length),
        response_length=int(config.response_length), max_num_seqs=int(config.max_num_seqs),
        temperature=float(config.temperature) if config.do_sample else 0.0, top_p=float(config.top_p),
        top_k=int(config.top_k), host=host, port=0,
    )


async def _settle(requests: list[_Request], call: Any, *args: Any) -> None:
    """Run ``call(*args)`` in a thread; its results answer ``requests`` in order, or its failure
    answers each of them (none is left waiting)."""
    try:
        results = await asyncio.to_thread(call, *args)
    except Exception as exc:
        for request in requests:
            request.done.set_exception(exc)
        return
    for request, result in zip(requests, results, strict=True):
        request.done.set_result(result)


class LocalRolloutServer:
    """One replica's sampler: the policy in this process, batched ``generate`` calls.

    Constructed by :class:`LocalRolloutReplica` with the keyword arguments verl gives its
    vLLM servers; the model loads in :meth:`launch_server`.
    """

    def __init__(
        self, config: Any, model_config: Any, replica_rank: int, is_teacher: bool = False,
        is_reward_model: bool = False, **_: Any,
    ) -> None:
        self.config = config
        self.model_config = model_config
        self.replica_rank = replica_rank
        self.is_teacher = is_teacher
        self.is_reward_model = is_reward_model
        self.judge: Any = None  # a judge replica's ChatServer
        self.teacher: Any = None
        self._teacher_calls: asyncio.Lock | None = None
        self.global_steps: int | None = None
        self._pending: list[_Request] = []
        self._arrived: asyncio.Event | None = None
        self._batches: asyncio.Task[None] | None = None
        self._calls = 0
        # Held by a batch while it samples and by a weight load: a sync that arrives mid-batch
        # (verl's asynchronous trainers) waits for it, so each sample has one version's weights.
        self._weights_in_use = asyncio.Lock()
        self._port_reservation: Any = None
        self._media: dict[str, dict[str, Any]] = {}
        self.speaker: Any = None  # a speech stage's LocalSpeaker (omni_verl_cpu.speech)

    def get_master_address(self) -> tuple[str, int, int]:
        return ray.util.get_node_ip_address(), 0, 0

    async def launch_server(self, **_: Any) -> None:
        """Load the policy and the processor; start the batching loop (a judge replica: load
        the judge and serve it)."""
        if self.is_reward_model:
            await asyncio.to_thread(self._serve_judge)
            return
        from transformers import AutoConfig

        from omni_training.model_loading import load_policy
        from omni_training.settings import NO_LORA

        policy = CpuPolicy.from_env()
        hf_config = AutoConfig.from_pretrained(policy.model_path)
        self.processor = policy.processor(hf_config)  # a teacher shares the student's (checked at launch)
        if self.is_teacher:
            from omni_training.distillation import Teacher

            # verl hands a teacher replica its model as an unresolved config (``path``).
            path = str(self.model_config.path)
            adapter = policy.training_adapter(AutoConfig.from_pretrained(path))
            self.teacher = Teacher.from_pretrained(path, adapter, dtype="float32")
            # The student's samples were drawn under its logit mask; the teacher scores them
            # under the same one (omni_training.logit_mask).
            tokenizer = getattr(self.processor, "tokenizer", self.processor)
            mask_policy_logits(self.teacher.model, policy_logit_mask(
                policy.rollout_adapter(), policy.pipeline_mode, hf_config, self.processor, tokenizer,
            ))
            self._teacher_calls = asyncio.Lock()
            print(f"{ROLLOUT_NAME} teacher replica {self.replica_rank}: {path} loaded", flush=True)
            return
        adapter = policy.training_adapter(hf_config)
        self.model, _ = load_policy(policy.model_path, adapter, NO_LORA, dtype="float32")
        self.model.eval()
        pipeline = policy.rollout_adapter()
        tokenizer = getattr(self.processor, "tokenizer", self.processor)
        eos = tokenizer.eos_token_id
        self._arrived = asyncio.Event()
        self._batches = asyncio.create_task(self._batch_loop())
        if pipeline.policy_stage_id(policy.pipeline_mode) != 0:  # a speech stage: thinker, then talker
            self.speaker = LocalSpeaker.for_model(
                self.model, pipeline, hf_config, self.processor, tokenizer, answer_tokens=policy.max_spoken_tokens
            )
            return
        module = find_policy_module(self.model, pipeline, policy.pipeline_mode)
        mask = policy_logit_mask(pipeline, policy.pipeline_mode, hf_config, self.processor, tokenizer)
        self.engine = LocalEngine(
            module,
            eos_token_ids=(eos,),
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos,
            stage_id=pipeline.policy_stage_id(policy.pipeline_mode),
            suppress_token_ids=masked_ids(mask, int(module.get_output_embeddings().weight.shape[0])),
            prompts_per_call=int(self.config.max_num_seqs) if self.config.max_num_seqs else None,
        )

    def _serve_judge(self) -> None:
        from omni_rollout.chat_server import ChatServer

        path = str(self.model_config.path)
        self.judge = ChatServer(judge_settings(self.config, path, ray.util.get_node_ip_address())).start()
        print(f"{ROLLOUT_NAME} judge replica {self.replica_rank}: {path} answers "
              f"http://{self.judge.address}/v1/chat/completions", flush=True)

    def get_server_address(self) -> tuple[str, int]:
        """``(ip, port)``: verl's load balancer keys replicas by it (a free port, held); a judge
        replica's is its chat endpoint, where verl's router sends the reward function's requests."""
        from verl.utils.net_utils import get_free_port

        if self.judge is not None:
            host, port = self.judge.address.rsplit(":", 1)
            return host, int(port)
        address = ray.util.get_node_ip_address()
        if self._port_reservation is None:
            self._port, self._port_reservation = get_free_port(address, with_alive_sock=True)
        return address, self._port

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: list[Any] | None = None,
        video_data: list[Any] | None = None,
        audio_data: list[Any] | None = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
        **_: Any,
    ) -> TokenOutput:
        """One sample for ``prompt_ids``, with its log-probs (verl's server signature)."""
        prompt_ids = [int(t) for t in prompt_ids]
        params = dict(sampling_params)
        num_prompt_logprobs = params.pop("prompt_logprobs", None)
        if num_prompt_logprobs is not None and num_prompt_logprobs is not False:
            return await self._score(prompt_ids, int(num_prompt_logprobs), image_data, video_data, audio_data, mm_processor_kwargs)
        if self.is_teacher:
            raise ValueError(f"{ROLLOUT_NAME} teacher replica {self.replica_rank} scores sequences (prompt_logprobs); it does not sample.")
        if self.is_reward_model:
            raise ValueError(f"{ROLLOUT_NAME} judge replica {self.replica_rank} answers chat requests at "
                             f"http://{self.judge.address}/v1/chat/completions; it does not sample token ids.")
        # Unset, vLLM takes the model's context length; here the run's prompt + response budget.
        max_model_len = self.config.max_model_len or self.config.prompt_length + self.config.response_length
        room = int(max_model_len) - len(prompt_ids)
        if room < 1:
            raise ValueError(f"Prompt length {len(prompt_ids)} leaves no room within max_model_len={max_model_len}.")
        params.pop("logprobs", None)  # always returned
        max_tokens = params.pop("max_tokens", params.pop("max_new_tokens", None))
        if max_tokens is None:
            max_tokens = min(self.config.response_length, self.config.prompt_length + self.config.response_length - len(prompt_ids))
        settings = sampling_settings(params, max(1, min(int(max_tokens), room)))
        if self.speaker is not None:
            speech_settings(settings)  # refused here, in the request that asked for it
        inputs = await self._inputs(prompt_ids, image_data, video_data, audio_data, mm_processor_kwargs)
        assert self._arrived is not None, "generate before launch_server"
        request = _Request(inputs, settings, asyncio.get_running_loop().create_future())
        self._pending.append(request)
        self._arrived.set()
        rollout = await request.done
        if self.speaker is not None:
            output: TokenOutput = rollout
            output.extra_fields["global_steps"] = request.version
            return output
        sample = rollout.outputs[0]
        return TokenOutput(
            token_ids=list(sample.token_ids),
            log_probs=list(sample.logprobs),
            stop_reason="completed",
            extra_fields={"global_steps": request.version, "finish_reason": sample.data["finish_reason"]},
        )

    async def _inputs(self, prompt_ids: list[int], *media: Any) -> dict[str, Any]:
        key = media_key(prompt_ids, *media)
        inputs = self._media.get(key)
        if inputs is None:  # a GRPO group's n requests share their prompt's features
            inputs = await asyncio.to_thread(media_inputs, self.processor, prompt_ids, *media)
            self._media[key] = inputs
            while len(self._media) > MEDIA_CACHE_PROMPTS:
                self._media.pop(next(iter(self._media)))
        return inputs

    async def _score(self, sequence_ids: list[int], num: int, *media: Any) -> TokenOutput:
        """A teacher request: the log-probs of ``sequence_ids``' own tokens, nothing sampled."""
        if self.teacher is None:
            raise ValueError(
                f"{ROLLOUT_NAME} replica {self.replica_rank} samples the student; prompt_logprobs are "
                "answered by teacher replicas (distillation.enabled=true)."
            )
        assert self._teacher_calls is not None
        inputs = await asyncio.to_thread(media_inputs, self.processor, sequence_ids, *media)
        async with self._teacher_calls:  # one forward at a time: they share the cores
            ids, log_probs = await asyncio.to_thread(prompt_log_probs, self.teacher, inputs, num)
        return TokenOutput(token_ids=[], log_probs=[], stop_reason="completed",
                           extra_fields={"prompt_ids": ids, "prompt_logprobs": log_probs})

    async def _batch_loop(self) -> None:
        assert self._arrived is not None
        while True:
            await self._arrived.wait()
            await asyncio.sleep(BATCH_WINDOW_S)
            self._arrived.clear()
            pending, self._pending = self._pending, []
            groups: dict[SamplingSettings, list[_Request]] = {}
            for request in pending:
                groups.setdefault(request.settings, []).append(request)
            for settings, requests in groups.items():
                await self._run(settings, requests)

    async def _run(self, settings: SamplingSettings, requests: list[_Request]) -> None:
        async with self._weights_in_use:
            for request in requests:
                request.version = self.global_steps
            if self.speaker is not None:
                await self._speak(settings, requests)
                return
            self._calls += 1
            seeded = replace(settings, seed=self._seed())
            await _settle(requests, self.engine.generate, [r.inputs for r in requests], seeded)

    async def _speak(self, settings: SamplingSettings, requests: list[_Request]) -> None:
        """A speech stage's requests: one ``sample_speech`` call per prompt, for all of its samples."""
        by_prompt: dict[tuple[int, ...], list[_Request]] = {}
        for request in requests:
            by_prompt.setdefault(tuple(request.inputs["input_ids"][0].tolist()), []).append(request)
        for prompt_ids, group in by_prompt.items():
            self._calls += 1
            await _settle(group, self.speaker.speak, prompt_ids, len(group), speech_settings(settings), self._seed())

    def _seed(self) -> int:
        return int(self.config.seed) * 1_000_003 + self.replica_rank * 10_007 + self._calls

    async def load_weights(self, weights: dict[str, torch.Tensor], global_steps: int | None) -> int:
        """Copy the actor's weights into the policy, once no batch samples with it; returns how
        many tensors were loaded.

        Raises:
            KeyError: a name the policy does not have (the two sides loaded different models).
        """
        async with self._weights_in_use:
            return self._copy_weights(weights, global_steps)

    def _copy_weights(self, weights: dict[str, torch.Tensor], global_steps: int | None) -> int:
        weights = pack_experts(weights)
        state = self.model.state_dict()
        unknown = sorted(set(weights) - set(state))
        if unknown:
            raise KeyError(
                f"rollout.name={ROLLOUT_NAME} received {len(unknown)} weights its policy does not have, e.g. "
                f"{unknown[:3]}; the actor and the rollout loaded different models."
            )
        with torch.no_grad():
            for name, value in weights.items():
                if state[name].shape != value.shape:
                    raise ValueError(f"{name}: the actor sent {tuple(value.shape)}, the policy has {tuple(state[name].shape)}.")
                state[name].copy_(value)
        self.global_steps = global_steps
        # One line per sync, in the driver's log: which step's weights each replica samples with.
        print(
            f"{ROLLOUT_NAME} replica {self.replica_rank}: weights of step {global_steps} loaded "
            f"({len(weights)} tensors, sha256 {weights_digest(weights)[:16]})",
            flush=True,
        )
        return len(weights)

    async def wake_up(self, tags: list[str] | None = None) -> None:
        return None  # nothing is released on the CPU

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None  # the local engine keeps no cache between calls

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def wait_for_requests_to_drain(self) -> None:
        while self._pending:
            await asyncio.sleep(BATCH_WINDOW_S)

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict[str, Any]:
        # Synchronous rollouts never abort; a running generate call is not interruptible.
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self) -> None:
        return None

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict[str, Any]:
        return {"aborted": False, "error": f"{ROLLOUT_NAME} does not abort requests"}

    async def start_profile(self, **_: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


class LocalRolloutReplica(RolloutReplica):
    """One :class:`LocalRolloutServer`, on the node of the training rank it serves."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def init_colocated(self, resource_pool: Any) -> None:
        """A judge replica on its pool (its own, or the training ranks'): only its server. verl
        would first start a ``CheckpointEngineWorker`` per slot, which a judge never uses (it
        takes no weights) and which costs a process of its own on the CPU."""
        if not self.is_reward_model:
            await super().init_colocated(resource_pool)
            return
        self.rollout_mode = RolloutMode.COLOCATED
        self.resource_pool = resource_pool
        await self.launch_servers()

    async def launch_servers(self) -> None:
        if self.world_size != 1:
            raise ValueError(
                f"rollout.name={ROLLOUT_NAME} runs one process per replica: set "
                "actor_rollout_ref.rollout.tensor_model_parallel_size=1 (and data/pipeline parallel size 1)."
            )
        if self.workers:
            node_id = await self.workers[0].__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id())
        else:
            node_id = ray.get_runtime_context().get_node_id()
        role = "reward_" if self.is_reward_model else "teacher_" if self.is_teacher_model else ""
        server: Any = (
            ray.remote(LocalRolloutServer)
            .options(
                scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
                name=f"{ROLLOUT_NAME}_server_{role}{self.replica_rank}_0{self.name_suffix}",
                max_concurrency=self.max_concurrency,
                num_cpus=0,
            )
            .remote(
                config=self.config, model_config=self.model_config, replica_rank=self.replica_rank,
                is_teacher=self.is_teacher_model, is_reward_model=self.is_reward_model,
            )
        )
        await server.launch_server.remote()
        self.servers = [server]
        self._server_handle = server
        address, port = await server.get_server_address.remote()
        self._server_address = f"{address}:{port}"


class LocalRolloutWorkerAdapter(BaseRollout):
    """The rollout half verl builds inside each actor rank (or, with the rollout on ranks of
    its own, inside each rollout rank's ``CheckpointEngineWorker``): sends the weights it is
    given to its replica's server (the first rank of each replica; every rank walks the
    stream, since gathering a sharded tensor is a collective)."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ["RANK"])
        per_replica = (
            self.config.tensor_model_parallel_size * self.config.data_parallel_size * self.config.pipeline_model_parallel_size
        )
        self.replica_rank = rank // per_replica if replica_rank == -1 else replica_rank
        self.sends = rank % per_replica == 0
        self._server: Any = None

    def _server_handle(self) -> Any:
        if self._server is None:
            self._server = ray.get_actor(f"{ROLLOUT_NAME}_server_{self.replica_rank}_0")
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None  # the server releases nothing between steps

    async def release(self) -> None:
        return None

    async def update_weights(
        self,
        weights: Iterable[tuple[str, torch.Tensor]] | AsyncIterable[tuple[str, torch.Tensor]],
        wire_format: str = "named_tensors",
        global_steps: int | None = None,
        peft_config: Any = None,
        **_: Any,
    ) -> None:
        if wire_format != "named_tensors":
            raise ValueError(f"rollout.name={ROLLOUT_NAME} takes full tensors (wire_format=named_tensors), got {wire_format!r}.")
        if peft_config is not None:
            raise ValueError(
                f"rollout.name={ROLLOUT_NAME} loads merged weights; set actor_rollout_ref.model.lora.merge=true."
            )
        # A generator in the actor's process (colocated sync); an async one from a checkpoint
        # engine in a rollout worker of its own (separated rollout, e.g. one-step-off).
        collected = {name: tensor.detach().to("cpu").clone() async for name, tensor in ensure_async_iterator(weights)}
        if self.sends:
            loaded = await self._server_handle().load_weights.remote(collected, global_steps)
            logger.info("omni_local: %d tensors to replica %d (step %s)", loaded, self.replica_rank, global_steps)
