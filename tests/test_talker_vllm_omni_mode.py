"""Rollout mode ``talker`` through the vLLM-Omni engine on CPU, with the local engine as the oracle.

The tiny Qwen3-Omni's talker samples speech for a thinker answer in the local engine. The same
samples are then returned the way vLLM-Omni 0.28 returns a request of the talker-RL pipeline
(a recording stand-in for ``AsyncOmni``: the thinker's text, the talker's codec-0 tokens and
log-probs, its prefill placeholder and ``codes.audio``, code2wav's waveform), go through
``VllmOmniEngine`` (real
vLLM ``SamplingParams``), the ``omni_single_turn`` agent loop and the rollout adapter's
``postprocess_agent_loop_output``, and reach the actor, which rebuilds the talker's
conditioning from the stored thinker sequence. The actor's log-probs must match the sampled
ones as they do for the local engine's samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

pytest.importorskip("vllm", reason="needs the gpu extra (vllm): uv sync --extra gpu")

from omni_qwen3.rollout_adapter import Qwen3OmniRolloutAdapter  # noqa: E402
from omni_qwen3.talker_adapter import Qwen3OmniTalkerAdapter  # noqa: E402
from omni_qwen3.talker_fields import RESIDUAL_CODES, SOURCE_IDS, TALKER_FIELDS  # noqa: E402
from omni_qwen3.talker_outputs import SAMPLE_RATE, WAVEFORM  # noqa: E402
from omni_rollout.agent_loops import get_agent_loop  # noqa: E402
from omni_rollout.vllm_omni import DeployOptions, ReplicaLayout, VllmOmniEngine  # noqa: E402
from omni_rollout.vllm_omni.engine import EngineRequest, PolicySampling  # noqa: E402
from omni_rollout.vllm_omni.testing import RecordingAsyncOmni  # noqa: E402

pytestmark = pytest.mark.slow

SPOKEN = "Three apples and two pears."
N = 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    return build_tiny_qwen3_omni(tmp_path_factory.mktemp("tiny") / "ckpt", seed=0)


@pytest.fixture(scope="module")
def policy(tiny: Path) -> Any:
    from omni_qwen3.talker_policy import Qwen3OmniTalkerPolicy

    return Qwen3OmniTalkerPolicy.from_pretrained(tiny).eval()


@pytest.fixture(scope="module")
def turn(tiny: Path, policy: Any) -> tuple[list[int], list[int]]:
    """The chat prompt and the thinker's answer to it, ending with ``<|im_end|>`` as sampled."""
    processor = Qwen3OmniTalkerAdapter().configure_processor(str(tiny), policy.config)
    messages = [{"role": "user", "content": [{"type": "text", "text": "How many fruits?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt = processor.tokenizer(text)["input_ids"]
    answer = processor.tokenizer.encode(SPOKEN) + [policy.config.im_end_token_id]
    return list(prompt), answer


@pytest.fixture(scope="module")
def local_samples(policy: Any, turn: tuple[list[int], list[int]]) -> list[Any]:
    prompt, answer = turn
    torch.manual_seed(3)
    return policy.sample_speech(torch.tensor([prompt + answer[:-1]]), n=N, max_new_tokens=24)


def as_vllm_omni(prompt: Sequence[int], answer: Sequence[int], sample: Any, rate: int) -> list[Any]:
    """What ``AsyncOmni.generate`` yields for one request of the talker-RL pipeline (vLLM-Omni
    0.28), built from a local sample: the thinker's answer, the talker's tokens with codes rows
    for the prefill (zeros) and each consumed token, and code2wav's waveform."""
    tokens = list(sample.response_ids)
    consumed = len(tokens) - 1  # the last token (the end of speech) is never fed back
    residual = sample.extra_fields[RESIDUAL_CODES][:consumed]
    decode = torch.cat([torch.tensor(tokens[:consumed])[:, None], residual], dim=1)
    codes = torch.cat([torch.zeros(len(sample.prompt_ids), decode.shape[1], dtype=torch.long), decode])
    logprobs = [{t: SimpleNamespace(logprob=lp)} for t, lp in zip(tokens, sample.response_logprobs, strict=True)]
    thinker = SimpleNamespace(
        stage_id=0, finished=True, prompt_token_ids=list(prompt),
        outputs=[SimpleNamespace(token_ids=list(answer), logprobs=None, finish_reason="stop")],
    )
    talker = SimpleNamespace(
        stage_id=1, finished=True, prompt_token_ids=[0] * len(sample.prompt_ids),
        outputs=[SimpleNamespace(token_ids=tokens, logprobs=logprobs, finish_reason="stop",
                                 multimodal_output={"codes": {"audio": codes}})],
    )
    code2wav = SimpleNamespace(
        stage_id=2, finished=True, prompt_token_ids=[],
        outputs=[SimpleNamespace(token_ids=[], logprobs=None, finish_reason="stop",
                                 multimodal_output={"audio": [sample.waveform[None]], "sr": [torch.tensor(rate)]})],
    )
    return [thinker, talker, code2wav]


def actor_log_probs(tiny: Path, samples: Sequence[Any]) -> torch.Tensor:
    """The local actor on samples as the trainer batches them (absent optional fields: None)."""
    from omni_training.actor import Actor
    from omni_training.batching import MicroBatch, collate

    actor = Actor.from_pretrained(str(tiny), Qwen3OmniTalkerAdapter())
    prompts = [{"input_ids": torch.tensor([s.prompt_ids]), "attention_mask": torch.ones(1, len(s.prompt_ids))} for s in samples]
    inputs, responses, mask = collate(prompts, [s.response_ids for s in samples], pad_token_id=0)
    extra = {key: [s.extra_fields.get(key) for s in samples] for key in TALKER_FIELDS
             if any(key in s.extra_fields for s in samples)}
    (log_probs,) = actor.compute_log_probs([MicroBatch(inputs, responses, mask, extra=extra)])
    return log_probs * mask


def padded(samples: Sequence[Any], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    rollout = torch.tensor([list(s.response_logprobs) + [0.0] * (width - len(s.response_ids)) for s in samples])
    mask = torch.tensor([[1.0] * len(s.response_ids) + [0.0] * (width - len(s.response_ids)) for s in samples])
    return rollout, mask


def test_vllm_omni_talker_samples_reach_the_actor_with_their_log_probs(
    tiny: Path, policy: Any, turn: tuple[list[int], list[int]], local_samples: list[Any], tmp_path: Path
) -> None:
    from vllm import SamplingParams

    from omni_training.consistency import rollout_actor_consistency

    prompt, answer = turn
    adapter = Qwen3OmniRolloutAdapter()
    rate = policy.speech_sample_rate
    by_request = {f"omni-rl-1-0-{k}": as_vllm_omni(prompt, answer, s, rate) for k, s in enumerate(local_samples)}
    thinker_defaults = SamplingParams(temperature=0.0, max_tokens=2048)  # vLLM-Omni's production thinker
    omni = RecordingAsyncOmni([thinker_defaults, SamplingParams(), SamplingParams(temperature=0.0)],
                              respond=lambda p, params, rid: by_request[rid])
    engine = VllmOmniEngine("unused", adapter, "talker", layout=ReplicaLayout(), options=DeployOptions(),
                            work_dir=tmp_path)
    engine._attach(omni)
    eos = policy.config.talker_config.codec_eos_token_id
    try:
        (converted,) = engine.generate([EngineRequest(prompt)], PolicySampling(n=N, max_tokens=24, stop_token_ids=(eos,)))
    finally:
        engine.close()

    # The talker samples with the policy's parameters; the thinker keeps its deploy defaults.
    params = [call["sampling_params_list"] for name, call in omni.calls if name == "generate"]
    assert len(params) == N
    assert all(p[1].temperature == 1.0 and p[1].logprobs == 0 and p[1].stop_token_ids == [eos] for p in params)
    assert all(p[0].temperature == 0.0 and p[0].max_tokens == 2048 and p[2].temperature == 0.0 for p in params)

    loop = get_agent_loop("omni_single_turn_agent")
    samples = [
        loop(prompt_ids=prompt, outputs=c.kept_outputs, adapter=adapter, mode="talker", specs=TALKER_FIELDS)
        for c in converted
    ]
    for sample, local in zip(samples, local_samples, strict=True):
        assert sample.response_ids == tuple(local.response_ids)
        assert sample.response_logprobs == pytest.approx(local.response_logprobs)
        assert len(sample.prompt_ids) == len(local.prompt_ids)
        assert sample.extra_fields[SOURCE_IDS].tolist() == prompt + answer[:-1]
        assert torch.equal(sample.extra_fields[WAVEFORM], local.waveform) and sample.extra_fields[SAMPLE_RATE] == rate
        consumed = len(local.response_ids) - 1
        assert torch.equal(sample.extra_fields[RESIDUAL_CODES][:consumed], local.extra_fields[RESIDUAL_CODES][:consumed])

    # One batch, both engines' samples: the actor rebuilds the conditioning of the vLLM-Omni ones.
    recomputed = actor_log_probs(tiny, [*local_samples, *samples])
    local_part, vllm_part = recomputed[:N], recomputed[N:]
    assert (local_part - vllm_part).abs().max() < 1e-5
    rollout, mask = padded(samples, recomputed.shape[1])
    metrics = rollout_actor_consistency(rollout, vllm_part, mask)
    assert metrics["training/rollout_actor_probs_pearson_corr"] >= 0.999
    assert abs(metrics["rollout_corr/log_ppl_diff"]) < 1e-5


def test_a_sample_whose_source_holds_media_is_refused(policy: Any, turn: tuple[list[int], list[int]]) -> None:
    prompt, answer = turn
    source = torch.tensor(prompt[:3] + [policy.config.thinker_config.image_token_id] + prompt[3:] + answer[:-1])
    with pytest.raises(ValueError, match=r"holds media placeholders.*vllm-omni#3184"):
        policy(
            input_ids=torch.zeros(1, 12, dtype=torch.long), attention_mask=torch.ones(1, 12, dtype=torch.long),
            residual_codes=[torch.zeros(2, 3, dtype=torch.long)], talker_source_ids=[source],
        )


def test_a_source_that_does_not_give_the_rows_prefill_is_refused(
    tiny: Path, local_samples: list[Any], turn: tuple[list[int], list[int]]
) -> None:
    """A prefill placeholder of the wrong length (a vLLM-Omni that counted the talker's
    prefill differently) is caught, not trained on shifted rows."""
    from omni_contracts import RolloutSample

    prompt, answer = turn
    local = local_samples[0]
    wrong = RolloutSample(
        prompt_ids=(0,) * (len(local.prompt_ids) + 1), response_ids=local.response_ids,
        response_mask=(1,) * len(local.response_ids), response_logprobs=local.response_logprobs,
        extra_fields={SOURCE_IDS: torch.tensor(prompt + answer[:-1]), RESIDUAL_CODES: local.extra_fields[RESIDUAL_CODES]},
    )
    with pytest.raises(ValueError, match="do not belong to it"):
        actor_log_probs(tiny, [wrong])


def test_weights_sync_to_the_talker_stage_only(tmp_path: Path) -> None:
    """Mode ``talker``: full weights reload on stage 1 (the thinker keeps its own); a LoRA plan
    is refused before any call (vLLM-Omni 0.28 serves LoRA on stage 0 only)."""
    from omni_rollout.vllm_omni import FullWeights, WeightSyncError, plan_weight_sync

    adapter = Qwen3OmniRolloutAdapter()
    omni = RecordingAsyncOmni([None, None, None])
    engine = VllmOmniEngine("unused", adapter, "talker", layout=ReplicaLayout(),
                            options=DeployOptions(enable_sleep_mode=True), work_dir=tmp_path)
    engine._attach(omni)
    try:
        plan = plan_weight_sync(adapter, "talker", payload="full", colocated=True)
        assert plan.stage_ids == (1,)
        engine.before_train(plan)
        engine.after_train(plan, FullWeights({"talker.codec_head.weight": torch.ones(4, 2)}))
        reloads = [call for name, call in omni.calls if name == "collective_rpc"]
        assert [(c["method"], c["stage_ids"]) for c in reloads] == [("reload_weights", [1])]
        lora = plan_weight_sync(adapter, "talker", payload="lora", colocated=True)
        with pytest.raises(WeightSyncError, match="serves a request's LoRA on stage 0 only"):
            engine.check_plan(lora)
    finally:
        engine.close()


@dataclass
class StagedNamesOmni(RecordingAsyncOmni):
    """Also reads the tensor names of each staged full-weights reload, while the file exists."""

    staged: list[list[str]] = field(default_factory=list)

    async def collective_rpc(self, method: str, timeout: float | None = None, args: tuple[Any, ...] = (),
                             kwargs: dict[str, Any] | None = None, stage_ids: list[int] | None = None) -> list[Any]:
        if method == "reload_weights":
            from safetensors import safe_open

            with safe_open(str(Path((kwargs or {})["weights_path"]) / "model.safetensors"), "pt") as staged:
                self.staged.append(sorted(staged.keys()))
        return await super().collective_rpc(method, timeout, args, kwargs, stage_ids)


ACTOR_STATE = ("code2wav.decoder.0.conv.weight", "talker.codec_head.weight", "talker.model.norm.weight",
               "thinker.lm_head.weight", "thinker.model.norm.weight")
"""Names of a talker actor's state dict: it holds the frozen thinker and code2wav too."""


@pytest.mark.parametrize(
    ("mode", "staged"),
    [("talker", ["talker.codec_head.weight", "talker.model.norm.weight"]), ("thinker_only", list(ACTOR_STATE))],
)
def test_a_full_sync_stages_only_what_the_synced_stage_loads(tmp_path: Path, mode: str, staged: list[str]) -> None:
    """The talker stage loads ``talker.*``: the frozen thinker (60 GB on the real checkpoint) is
    not written out for it to throw away. A thinker run stages what it is given, as before."""
    from omni_rollout.vllm_omni import FullWeights, plan_weight_sync

    adapter = Qwen3OmniRolloutAdapter()
    omni = StagedNamesOmni([None, None, None])
    engine = VllmOmniEngine("unused", adapter, mode, layout=ReplicaLayout(), options=DeployOptions(), work_dir=tmp_path)
    engine._attach(omni)
    try:
        plan = plan_weight_sync(adapter, mode, payload="full", colocated=False)
        engine.after_train(plan, FullWeights({name: torch.ones(2) for name in ACTOR_STATE}))
    finally:
        engine.close()
    assert omni.staged == [staged]


def test_a_groups_shared_source_runs_the_thinker_once(
    policy: Any, turn: tuple[list[int], list[int]], local_samples: list[Any]
) -> None:
    """The n samples of a group speak one thinker answer: its conditioning is rebuilt once and
    reused (the thinker is frozen in talker training), with the same logits."""
    prompt, answer = turn
    source = torch.tensor(prompt + answer[:-1])
    width = max(len(s.prompt_ids) + len(s.response_ids) for s in local_samples)
    ids = torch.zeros(len(local_samples), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, s in enumerate(local_samples):
        length = len(s.prompt_ids) + len(s.response_ids)
        ids[row, len(s.prompt_ids) : length] = torch.tensor(s.response_ids)
        mask[row, :length] = 1  # right-padded, as verl lays rows out
    calls = []
    hook = policy.thinker.register_forward_hook(lambda *_: calls.append(1))
    policy._rebuilt.clear()
    try:
        inputs = {"input_ids": ids, "attention_mask": mask, "residual_codes": [s.extra_fields[RESIDUAL_CODES] for s in local_samples],
                  "talker_source_ids": [source] * len(local_samples)}
        first = policy(**inputs).logits
        second = policy(**inputs).logits
        assert len(calls) == 1
        policy._rebuilt.clear()
        assert torch.equal(policy(**inputs).logits, first) and torch.equal(second, first) and len(calls) == 2
    finally:
        hook.remove()
