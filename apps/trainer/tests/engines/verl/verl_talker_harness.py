"""verl's own code on a talker run, on the CPU: rollout server -> agent loop -> batch -> FSDP forward.

Run as a script (``python verl_talker_harness.py OUT_DIR``) by ``test_verl_talker_harness.py``,
in a process of its own (verl picks its device platform once per process).

What runs, verl 0.9.1's code unchanged with our registered classes:

1. text rows in the RL schema, read by our ``data.custom_cls`` and collated by verl;
2. verl's ``AgentLoopWorker.generate_sequences`` in our worker, with our
   :class:`OmniSpeechAgentLoop` (``stage=talker`` translates to it) and its postprocessing
   into the padded training batch (the namespaced fields as non-tensor entries);
3. the rollout server is ours (``VllmOmniHttpServer.generate``: verl's ``generate`` on the
   vLLM-Omni driver in mode ``talker``, adding the speech sample) on a recording
   ``AsyncOmni`` whose answers are what vLLM-Omni 0.28 returns for a ``thinker_talker``
   request, built from the tiny model's own talker samples (the local engine) for the
   thinker answer :data:`ANSWER` -- cut at the thinker's length limit for :data:`CUT_QUESTION`;
4. verl's batch conversion and FSDP2 engine (:class:`OmniFSDPEngine`, padded rows, gloo,
   fp32), whose forward gets the fields through the talker adapter;
5. the oracle: the sampled log-probs and the local actor on the local engine's samples.

The JSON report holds, per row, what the test asserts; nothing is judged here.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
QUESTIONS = ("How many fruits?", "Say something kind.", "What is the sun?")
CUT_QUESTION = "Count to a hundred."
"""The row whose thinker answer stops at its length limit (``finish_reason="length"``, no end of turn)."""
ANSWER_TEXT = "Three apples and two pears."
MAX_SPEECH = 16
AUDIO_REWARDS = [{"name": "duration", "weight": 1.0}, {"name": "silence", "weight": 0.5}]


def write_rows(root: Path) -> str:
    from omni_data.schema import rl_row, write_rl_parquet

    rows = [
        rl_row(data_source="my/speech", messages=[{"role": "user", "content": q}], ground_truth="", ability="speech",
               extra_info={"index": i})
        for i, q in enumerate((*QUESTIONS, CUT_QUESTION))
    ]
    return str(write_rl_parquet(rows, root / "speech.parquet"))


class SpeechServer:
    """verl's ``LLMServerClient`` surface over our server on a recording ``AsyncOmni``."""

    def __init__(self, policy: Any, answer: list[int], tokenizer: Any) -> None:
        from vllm import SamplingParams

        from omni_qwen3.talker_fields import TALKER_FIELDS
        from omni_rollout.vllm_omni.testing import RecordingAsyncOmni
        from verl_server_stub import stub_server

        self.policy, self.answer, self.tokenizer = policy, answer, tokenizer
        self.samples: dict[tuple[int, ...], Any] = {}
        self.cut: set[tuple[int, ...]] = set()
        omni = RecordingAsyncOmni(
            [SamplingParams(temperature=0.0, max_tokens=2048), SamplingParams(), SamplingParams(temperature=0.0)],
            respond=self.respond,
        )
        self.server = stub_server(omni, mode="talker", field_specs=TALKER_FIELDS, max_model_len=512,
                                  prompt_length=256, response_length=MAX_SPEECH)

    def respond(self, prompt: dict[str, Any], params: list[Any], request_id: str) -> list[Any]:
        """What vLLM-Omni yields for the request: the thinker's answer, then the talker's
        speech for it (sampled by the local engine), its codes after the prefill's rows, and
        code2wav's waveform of it."""
        import torch

        from omni_qwen3.talker_fields import RESIDUAL_CODES
        from verl_server_stub import stage_output

        ids = [int(t) for t in prompt["prompt_token_ids"]]
        cut = CUT_QUESTION in self.tokenizer.decode(ids)
        answer, finish = (self.answer[:-1], "length") if cut else (self.answer, "stop")
        if cut:
            self.cut.add(tuple(ids))
        torch.manual_seed(len(ids))
        (local,) = self.policy.sample_speech(torch.tensor([ids + answer[:-1]]), n=1,
                                             max_new_tokens=params[1].max_tokens)
        self.samples[tuple(ids)] = local
        tokens = list(local.response_ids)
        consumed = len(tokens) - 1
        decode = torch.cat([torch.tensor(tokens[:consumed])[:, None], local.extra_fields[RESIDUAL_CODES][:consumed]], 1)
        codes = torch.cat([torch.zeros(len(local.prompt_ids), decode.shape[1], dtype=torch.long), decode])
        return [
            stage_output(0, ids, answer, finish_reason=finish),
            stage_output(1, [0] * len(local.prompt_ids), tokens, logprobs=local.response_logprobs,
                         multimodal_output={"codes": {"audio": codes}}),
            stage_output(2, [], [], multimodal_output={"audio": local.waveform[None],
                                                       "sr": torch.tensor(self.policy.speech_sample_rate)}),
        ]

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       priority: int = 0, **media: Any) -> Any:
        return await self.server.generate(prompt_ids=prompt_ids, sampling_params=dict(sampling_params),
                                          request_id=request_id, priority=priority)


def main(out_dir: Path) -> None:
    sys.path.insert(0, str(HERE))
    from omni_verl_cpu.platform import use_cpu_platform

    use_cpu_platform()  # before any verl module asks for a device

    import torch
    from omegaconf import open_dict

    from omni_qwen3.talker_fields import TALKER_FIELDS
    from omni_qwen3.talker_policy import Qwen3OmniTalkerPolicy
    from omni_qwen3.tiny import build_tiny_qwen3_omni
    from omni_trainer.config import load_config
    from omni_verl.settings import SETTINGS_ENV
    from omni_trainer.engines.verl.translate import settings_for, to_verl_config

    out_dir.mkdir(parents=True, exist_ok=True)
    tiny = str(build_tiny_qwen3_omni(out_dir / "tiny", seed=0))
    data = write_rows(out_dir)
    rows = len(QUESTIONS) + 1
    config = load_config([
        f"actor_rollout_ref.model.path={tiny}", f"data.train_files=[{data}]", "trainer.engine=verl",
        "actor_rollout_ref.model.stage=talker", "actor_rollout_ref.rollout.pipeline_mode=talker",
        "data.spoken_text=thinker", f"data.train_batch_size={rows}", f"actor_rollout_ref.actor.ppo_mini_batch_size={rows}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={rows}", "actor_rollout_ref.rollout.n=1",
        "data.max_prompt_length=256", f"data.max_response_length={MAX_SPEECH}",
        "actor_rollout_ref.model.lora_rank=0", "actor_rollout_ref.model.use_remove_padding=false",
        f"reward.audio_rewards={json.dumps(AUDIO_REWARDS)}",
    ])
    verl_config = to_verl_config(config, lora_target_modules=None, lora_exclude_modules=None)
    settings = settings_for(config, tiny)
    os.environ[SETTINGS_ENV] = settings.to_env()
    with open_dict(verl_config):  # fp32 end to end
        verl_config.actor_rollout_ref.actor.fsdp_config.mixed_precision = {
            "param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32",
        }

    # 1-3. verl's dataset loading, collation, our speech agent loop, its postprocessing.
    from verl import DataProto
    from verl.utils.dataset.rl_dataset import collate_fn

    import omni_verl.external  # noqa: F401  (what VERL_USE_EXTERNAL_MODULES imports)
    from omni_verl.agent_loop import OmniAgentLoopWorker
    from omni_verl.dataset import OmniRLHFDataset
    from omni_verl.processor import adapter_processor

    processor = adapter_processor(settings)
    answer = processor.tokenizer.encode(ANSWER_TEXT) + [processor.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    policy = Qwen3OmniTalkerPolicy.from_pretrained(tiny).eval()
    dataset = OmniRLHFDataset([data], tokenizer=processor.tokenizer, config=verl_config.data, processor=processor)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    server = SpeechServer(policy, answer, processor.tokenizer)
    worker = OmniAgentLoopWorker(verl_config, llm_client=server)
    output = asyncio.run(worker.generate_sequences(batch))

    # 4. verl's FSDP2 engine: the talker's log-probs as its actor worker computes them (padded rows).
    from verl_cpu_harness import fsdp_log_probs, weight_sync_names

    engine, verl_log_probs = fsdp_log_probs(verl_config, output, remove_padding=False)

    # 5. The local actor on the local engine's samples (their stored conditioning).
    from omni_qwen3.talker_adapter import Qwen3OmniTalkerAdapter
    from omni_rewards.audio import WeightedAudioReward
    from omni_training.actor import Actor
    from omni_training.batching import MicroBatch, collate
    from omni_training.policy_loss import PolicyLossConfig
    from omni_training.settings import NO_LORA, ActorSettings, OptimizerSettings

    actor_settings = ActorSettings(
        loss_mode="vanilla", policy_loss=PolicyLossConfig(loss_agg_mode="token-mean"), gradient_checkpointing=False
    )
    actor = Actor.from_pretrained(
        tiny, Qwen3OmniTalkerAdapter(), settings=actor_settings, lora=NO_LORA, optim=OptimizerSettings(lr=1e-6)
    )
    report: dict[str, Any] = {
        "engine_class": type(engine).__name__, "module_class": type(engine.module).__name__,
        "agent_loop": str(verl_config.actor_rollout_ref.rollout.agent.default_agent_loop), "rows": [],
        "weight_sync": weight_sync_names(engine), "cut_rows": [],
    }
    keys = sorted(k for k in output.non_tensor_batch if k in TALKER_FIELDS)
    rewards = WeightedAudioReward(AUDIO_REWARDS)
    spoken = processor.tokenizer.decode(answer[:-1], skip_special_tokens=True)
    reward_keys = ["audio_reward/duration", "audio_reward/silence", "reward_ok", "reward_error", "source_truncated"]
    for i in range(rows):
        mask = output.batch["attention_mask"][i].bool()
        prompt_width = output.batch["prompts"].shape[1]
        prompt_ids = output.batch["input_ids"][i][:prompt_width][mask[:prompt_width]].tolist()
        response_mask = output.batch["response_mask"][i].bool()
        info = {k: float(output.non_tensor_batch[k][i]) for k in reward_keys if k in output.non_tensor_batch}
        source = output.non_tensor_batch["qwen3_omni.talker_source_ids"][i].tolist()
        if any(source[: len(ids)] == list(ids) for ids in server.cut):
            # The row whose thinker was cut: its speech tokens reach the batch, none is trained.
            report["cut_rows"].append({
                "tokens": int(mask[prompt_width:].sum()), "trained_tokens": int(response_mask.sum()),
                "reward_extra_info": info, "verl_log_probs_finite": bool(verl_log_probs[i].isfinite().all()),
            })
            continue
        response = output.batch["responses"][i][response_mask].tolist()
        (thinker_prompt,) = [p for p, s in server.samples.items() if list(s.response_ids) == response]
        local = server.samples[thinker_prompt]
        inputs = {"input_ids": torch.tensor([local.prompt_ids]), "attention_mask": torch.ones(1, len(local.prompt_ids))}
        model_inputs, responses, local_mask = collate([inputs], [local.response_ids], pad_token_id=0)
        extra = {key: [local.extra_fields[key]] for key in TALKER_FIELDS if key in local.extra_fields}
        (local_actor,) = actor.compute_log_probs([MicroBatch(model_inputs, responses, local_mask, extra=extra)])
        report["rows"].append({
            "prompt_is_placeholder": prompt_ids == [0] * len(local.prompt_ids),
            "response": response,
            "fields": keys,
            "source_is_thinker_sequence": output.non_tensor_batch["qwen3_omni.talker_source_ids"][i].tolist()
            == list(thinker_prompt) + answer[:-1],
            "sampled_log_probs": list(local.response_logprobs),
            "rollout_log_probs": output.batch["rollout_log_probs"][i][response_mask].tolist()
            if "rollout_log_probs" in output.batch.keys() else None,
            "local_actor_log_probs": local_actor[0].tolist(),
            "verl_log_probs": verl_log_probs[i][response_mask].tolist(),
            "rm_score": float(output.batch["rm_scores"][i].sum()) if "rm_scores" in output.batch.keys() else None,
            "reward_extra_info": info,
            "expected_reward": rewards(local.waveform.numpy(), policy.speech_sample_rate, spoken, ""),
        })
    (out_dir / "report.json").write_text(json.dumps(report, indent=1))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
