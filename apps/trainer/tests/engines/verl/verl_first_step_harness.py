"""One first training step on both engines, on the CPU in fp32, for the same rollouts.

Run as a script (``python verl_first_step_harness.py OUT_DIR``) by
``test_verl_first_step_differential.py``, in a process of its own: verl picks its device
platform once per process, and this one must be :mod:`omni_verl_cpu.platform`.

The rollouts: four rows (text, image+audio, audio, image) of the tiny Qwen3-Omni, each
answered with fixed tokens of its own length (:data:`ROWS`) by a stand-in server, through
verl's agent loop and postprocessing (as in ``verl_cpu_harness.py``), and given a fixed
advantage per row. Then, per objective of :data:`VARIANTS` (the translated config with that
``loss_mode`` / ``loss_agg_mode``, full fine-tuning, two micro-batches of two rows, one
mini-batch: one optimizer step), fresh from the checkpoint:

- verl: its actor worker (``ActorRolloutRefWorker``, role ``actor``, our ``OmniFSDPEngine`` on
  one gloo process) driven by verl's own driver code, ``RayPPOTrainer._compute_old_log_prob``
  then ``RayPPOTrainer._update_actor`` (called on a stand-in trainer that holds the config
  and the worker), and the metrics reduced as verl's ``fit`` reduces them;
- local: omni-training's ``Actor`` built as ``LocalTrainer`` builds it from the same config,
  on the same prompt rows and response tokens, updated as ``step.update_phase`` does on a
  first step (``on_policy``: the update's own forward gives the old log-probs).

Recorded for both: the old log-probs, the policy loss, the grad norm before clipping, one
weight matrix's change, and the log-probs after the step. Nothing is judged here.

verl's V1 trainer (what ``trainer.engine=verl`` launches) runs the same worker calls with the
same settings, its rows passed unpadded through TransferQueue instead of padded; only the
``seq-mean-token-sum-norm`` horizon depends on that (see the test).

Both sides load the same checkpoint (built with seed 0) and nothing in the step draws random
numbers (no dropout, no sampling). Of verl's ``fit`` between rollout and update, left out:
the reward and advantage computation (the advantages are given), ``balance_batch`` (it
reorders rows, which moves them between micro-batches; both engines normalise by the
mini-batch's totals, so the step does not depend on that order).

The last variant turns rollout correction on (:data:`CORRECTION`: token TIS and token k1
rejection) with a fixed mismatch injected: the rollout's log-probs are the old ones plus
:func:`mismatch`. verl applies it with its driver's ``compute_rollout_correction_and_add_to_batch``
between the old log-probs and the update (its weights and mask reach the worker's loss); the
local engine with ``step.apply_rollout_correction`` after a separate old-log-prob pass, as its
step does when correction is on.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# modality -> (response tokens, advantage): lengths differ, so token- and sequence-level
# aggregation give different losses, and the two micro-batches hold different token counts.
# Plain vocabulary ids (the tiny tokenizer's special tokens are 0-32: a media pad id in a
# response would be counted as media by the rope index).
ROWS: dict[str, tuple[list[int], float]] = {
    "text": ([401, 402, 403, 404, 405, 406, 407, 408, 409], 1.0),
    "image+audio": ([411, 412, 413], -0.5),
    "audio": ([421, 422, 423, 424, 425, 426], 0.25),
    "image": ([431, 432, 433, 434], -1.5),
}
DATASET_INDEX = {"text": 0, "image": 1, "audio": 2, "image+audio": 3}  # write_modality_rows' order
# (loss_mode, loss_agg_mode, entropy_coeff): our default objective, the token-level one, and
# Dr.GRPO's, whose horizon differs between the engines (see the test).
VARIANTS = (
    ("gspo", "seq-mean-token-mean", 0.0, False),
    ("vanilla", "token-mean", 0.0, False),
    ("vanilla", "seq-mean-token-sum-norm", 0.0, False),
    ("vanilla", "token-mean", 0.0, True),  # with rollout correction (the last: it edits the batch)
)
CORRECTION = {
    "rollout_is": "token", "rollout_is_threshold": 1.5, "rollout_rs": "token_k1", "rollout_rs_threshold": "0.5_1.7",
}
"""Ratios pi_old / pi_rollout of e^0.6 are truncated to 1.5; tokens with a ratio of e^-0.6 are rejected."""
OFFSETS = (-0.6, -0.3, 0.0, 0.3, 0.6)


def mismatch(shape: tuple[int, int]) -> Any:
    """The rollout's log-prob minus the actor's, per (row, response token): a fixed pattern."""
    import torch

    rows, cols = torch.meshgrid(torch.arange(shape[0]), torch.arange(shape[1]), indexing="ij")
    return torch.tensor(OFFSETS)[(3 * rows + cols) % len(OFFSETS)]
MICRO_BATCH = 2
LR = 1e-4  # large enough for one step to move the log-probs well past fp32 noise
WATCHED = "model.layers.0.self_attn.q_proj.weight"  # the weight whose update is compared


class PromptServer:
    """Stands in for the vLLM-Omni server: each prompt gets its row's fixed tokens."""

    def __init__(self, responses: dict[tuple[int, ...], list[int]]) -> None:
        self.responses = responses

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **media: Any
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        tokens = self.responses[tuple(prompt_ids)]
        return TokenOutput(
            token_ids=list(tokens), log_probs=[0.0] * len(tokens), stop_reason="completed", extra_fields={}
        )


def config_for(tiny: str, data: str, loss_mode: str, loss_agg_mode: str, entropy_coeff: float, corrected: bool) -> Any:
    from omni_trainer.config import load_config

    correction = [f"algorithm.rollout_correction.{key}={value}" for key, value in CORRECTION.items()] if corrected else []
    return load_config([*correction,
        f"actor_rollout_ref.model.path={tiny}", f"data.train_files=[{data}]",
        "trainer.engine=verl", "trainer.device=cpu",  # the CPU run's translation: fp32 mixed precision
        f"data.train_batch_size={len(ROWS)}", f"actor_rollout_ref.actor.ppo_mini_batch_size={len(ROWS)}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={MICRO_BATCH}", "actor_rollout_ref.rollout.n=1",
        "data.max_prompt_length=512", f"data.max_response_length={max(len(r) for r, _ in ROWS.values()) + 1}",
        "actor_rollout_ref.model.lora_rank=0", f"actor_rollout_ref.actor.optim.lr={LR}",
        f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}",
        f"actor_rollout_ref.actor.loss_agg_mode={loss_agg_mode}",
        f"actor_rollout_ref.actor.entropy_coeff={entropy_coeff}",
    ])


def init_process_group() -> None:
    """One gloo rank, as verl's worker would start it (the worker then finds it started)."""
    import torch

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)


def rollouts(verl_config: Any, settings: Any, data: str) -> tuple[Any, list[dict[str, Any]]]:
    """verl's agent loop on the rows of :data:`ROWS` (in that order): the training batch as
    verl's driver holds it before the old log-probs, advantages and fit's meta info added;
    and the local engine's prompt rows for the same samples."""
    import torch
    from verl import DataProto
    from verl.utils.dataset.rl_dataset import collate_fn

    from omni_verl.agent_loop import OmniAgentLoopWorker
    from omni_verl.dataset import OmniRLHFDataset
    from omni_verl.processor import adapter_processor

    processor = adapter_processor(settings)
    dataset = OmniRLHFDataset([data], tokenizer=processor.tokenizer, config=verl_config.data, processor=processor)
    indices = [DATASET_INDEX[m] for m in ROWS]
    ours = [dataset.dataset[i] for i in indices]
    server = PromptServer({tuple(o["input_ids"].tolist()): r for o, (r, _) in zip(ours, ROWS.values(), strict=True)})
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in indices]))
    output = asyncio.run(OmniAgentLoopWorker(verl_config, llm_client=server).generate_sequences(batch))

    mask = output.batch["response_mask"].float()
    for i, (o, (response, _)) in enumerate(zip(ours, ROWS.values(), strict=True)):
        got = output.batch["responses"][i][mask[i].bool()].tolist()
        if got != response:
            raise RuntimeError(f"row {i}: the agent loop's response {got} is not the server's {response}")
        prompt_width = output.batch["prompts"].shape[1]
        prompt = output.batch["input_ids"][i][:prompt_width][output.batch["attention_mask"][i][:prompt_width].bool()]
        if prompt.tolist() != o["input_ids"].tolist():
            raise RuntimeError(f"row {i}: the agent loop's prompt is not the dataset's")
    advantage = torch.tensor([a for _, a in ROWS.values()])[:, None]
    output.batch["advantages"] = advantage * mask  # as compute_advantage leaves them: 0 off the mask
    # What verl's fit adds before the old log-probs (ray_trainer.py, verl 0.9.1).
    output.meta_info["temperature"] = verl_config.actor_rollout_ref.rollout.temperature
    output.meta_info["global_token_num"] = torch.sum(output.batch["attention_mask"], dim=-1).tolist()
    output.meta_info["images_seqlens"] = [
        n for mm in output.non_tensor_batch["multi_modal_inputs"] if "image_grid_thw" in mm
        for n in mm["images_seqlens"].tolist()
    ]
    return output, ours


def full(param: Any) -> Any:
    return (param.full_tensor() if hasattr(param, "full_tensor") else param).detach().float().clone()


def watched(named: Any) -> tuple[str, Any]:
    (name, param), *more = [(n, p) for n, p in named if n.endswith(WATCHED)]
    if more:
        raise RuntimeError(f"{WATCHED} names more than one parameter: {[name, *(n for n, _ in more)]}")
    return name, param


def verl_step(verl_config: Any, batch: Any, corrected: bool) -> dict[str, Any]:
    """verl's actor worker and driver code for one step; old/new log-probs as ``[B, T]`` lists."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
    from verl.utils.metric import reduce_metrics
    from verl.workers.engine_workers import ActorRolloutRefWorker

    worker = ActorRolloutRefWorker(verl_config.actor_rollout_ref, role="actor")
    worker.init_model()
    driver = types.SimpleNamespace(config=verl_config, distillation_config=None, actor_rollout_wg=worker)
    module = worker.actor.engine.module
    name, param = watched(module.named_parameters())
    before = full(param)

    started = time.perf_counter()
    old, _ = RayPPOTrainer._compute_old_log_prob(driver, batch)
    old.batch.pop("entropys")
    batch = batch.union(old)
    correction: dict[str, float] = {}
    if corrected:
        mask = batch.batch["response_mask"]
        batch.batch["rollout_log_probs"] = (batch.batch["old_log_probs"] + mismatch(tuple(mask.shape))) * mask
        batch, correction = compute_rollout_correction_and_add_to_batch(batch, verl_config.algorithm.rollout_correction)
    output = RayPPOTrainer._update_actor(driver, batch)
    seconds = time.perf_counter() - started
    metrics = reduce_metrics(output.meta_info["metrics"])
    after = full(watched(module.named_parameters())[1])
    new, _ = RayPPOTrainer._compute_old_log_prob(driver, batch)  # the updated policy's
    kept = batch.batch["response_mask"]
    mask = batch.batch["attention_mask"][:, -kept.shape[1]:].bool()  # the sampled tokens, rejected or not
    return {
        "seconds": seconds,
        "correction": correction,
        "kept": rows_of(kept.float(), mask),
        "trainable": sum(p.numel() for p in module.parameters() if p.requires_grad),
        "metrics": {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)},
        "old_log_probs": rows_of(batch.batch["old_log_probs"], mask),
        "new_log_probs": rows_of(new.batch["old_log_probs"], mask),
        "watched": name,
        "watched_delta": (after - before),
    }


def rows_of(values: Any, mask: Any) -> list[list[float]]:
    return [row[m].tolist() for row, m in zip(values, mask, strict=True)]


def local_step(config: Any, tiny: str, ours: list[dict[str, Any]], corrected: bool) -> dict[str, Any]:
    """The local engine's actor, built and updated as the local trainer does on a first step."""
    import torch
    from transformers import AutoConfig

    from omni_contracts.training_adapter import resolve_training_adapter
    from omni_trainer.settings_builders import actor_settings, adapter_options, correction_settings, lora_settings, optim_settings
    from omni_trainer.engines.local.step import apply_rollout_correction, padded_log_probs
    from omni_training.actor import Actor
    from omni_training.batching import MicroBatch, collate

    cfg = config.actor_rollout_ref
    adapter = resolve_training_adapter(AutoConfig.from_pretrained(tiny), cfg.model.stage, adapter_options(config))
    actor = Actor.from_pretrained(
        tiny, adapter, settings=actor_settings(config), lora=lora_settings(config), optim=optim_settings(config, None)
    )
    # As the local trainer does, and verl's engine: the actor scores the rollout's masked distribution.
    from omni_contracts import get_rollout_adapter
    from omni_rollout.placeholders import policy_logit_mask

    processor = adapter.configure_processor(tiny, actor.model_config)
    rollout = config.actor_rollout_ref.rollout
    actor.mask_logits(policy_logit_mask(
        get_rollout_adapter(rollout.pipeline()), rollout.pipeline_mode, actor.model_config, processor, processor.tokenizer,
    ))
    name, param = watched(actor.model.named_parameters())
    before = full(param)
    rows = [(o, response, advantage) for o, (response, advantage) in zip(ours, ROWS.values(), strict=True)]
    micro = []
    size = cfg.actor.ppo_micro_batch_size_per_gpu
    for start in range(0, len(rows), size):
        chunk = rows[start : start + size]
        inputs = [
            {"input_ids": o["input_ids"][None], "attention_mask": o["attention_mask"][None], **o["multi_modal_inputs"]}
            for o, _, _ in chunk
        ]
        model_inputs, responses, mask = collate(inputs, [r for _, r, _ in chunk], pad_token_id=0)
        advantages = torch.tensor([a for _, _, a in chunk])[:, None] * mask.float()
        micro.append(MicroBatch(model_inputs, responses, mask, advantages=advantages))
    sampled = [mb.response_mask.clone() for mb in micro]
    started = time.perf_counter()
    correction: dict[str, float] = {}
    if corrected:  # step.logprob_phase with correction on: a separate old pass, then the correction
        width = max(mb.responses.shape[1] for mb in micro)
        for mb, old in zip(micro, actor.compute_log_probs(micro), strict=True):
            mb.old_log_probs = old
        old_lp = padded_log_probs([mb.old_log_probs for mb in micro], width)
        step_mask = torch.cat([torch.nn.functional.pad(m, (0, width - m.shape[1])) for m in sampled]).float()
        rollout_lp = (old_lp + mismatch(tuple(old_lp.shape))) * step_mask
        offset = 0
        for mb in micro:
            rows, cols = mb.responses.shape
            mb.rollout_log_probs = rollout_lp[offset : offset + rows, :cols]
            offset += rows
        _, correction = apply_rollout_correction(micro, width, step_mask, correction_settings(config))
        metrics = actor.update(micro)
    else:
        metrics = actor.update(micro, on_policy=True)  # step.update_phase on a first step
    seconds = time.perf_counter() - started
    after = full(param)
    new = actor.compute_log_probs(micro)
    return {
        "seconds": seconds,
        "correction": correction,
        "kept": [r for mb, m in zip(micro, sampled, strict=True) for r in rows_of(mb.response_mask.float(), m.bool())],
        "trainable": sum(p.numel() for p in actor.trainable),
        "metrics": metrics,
        "old_log_probs": [r for mb, m in zip(micro, sampled, strict=True) for r in rows_of(mb.old_log_probs, m.bool())],
        "new_log_probs": [r for m, lp in zip(sampled, new, strict=True) for r in rows_of(lp, m.bool())],
        "watched": name,
        "watched_delta": (after - before),
    }


def main(out_dir: Path) -> None:
    from omni_verl_cpu.platform import use_cpu_platform

    use_cpu_platform()  # before any verl module asks for a device

    import torch

    sys.path.insert(0, str(HERE))
    from verl_cpu_harness import build_tiny, write_rows

    import omni_verl.external  # noqa: F401  (what VERL_USE_EXTERNAL_MODULES imports in every verl process)
    from omni_verl.settings import SETTINGS_ENV
    from omni_trainer.engines.verl.translate import settings_for, to_verl_config

    started = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    tiny = build_tiny("qwen3", out_dir)
    data = write_rows(out_dir)
    init_process_group()
    report: dict[str, Any] = {"rows": list(ROWS), "lr": LR, "variants": []}
    batch = ours = None
    for loss_mode, loss_agg_mode, entropy_coeff, corrected in VARIANTS:
        config = config_for(tiny, data, loss_mode, loss_agg_mode, entropy_coeff, corrected)
        verl_config = to_verl_config(config, lora_target_modules=None, lora_exclude_modules=None)
        os.environ[SETTINGS_ENV] = settings_for(config, tiny).to_env()
        if batch is None:  # the rollouts do not depend on the objective: one set for all
            batch, ours = rollouts(verl_config, settings_for(config, tiny), data)
        assert ours is not None
        verl = verl_step(verl_config, batch, corrected)
        local = local_step(config, tiny, ours, corrected)
        actor = verl_config.actor_rollout_ref.actor
        delta_v, delta_l = verl.pop("watched_delta"), local.pop("watched_delta")
        report["variants"].append({
            "loss_mode": loss_mode, "loss_agg_mode": loss_agg_mode, "entropy_coeff": entropy_coeff, "corrected": corrected,
            "verl_config": {
                "loss_mode": actor.policy_loss.loss_mode, "loss_agg_mode": actor.loss_agg_mode,
                "entropy_coeff": actor.entropy_coeff, "loss_scale_factor": actor.loss_scale_factor,
                "mixed_precision": dict(actor.fsdp_config.mixed_precision), "clip_grad": actor.optim.clip_grad,
                "lr": actor.optim.lr, "weight_decay": actor.optim.weight_decay,
                "micro_batch": actor.ppo_micro_batch_size_per_gpu, "mini_batch": actor.ppo_mini_batch_size,
                "max_response_length": verl_config.data.max_response_length,
            },
            "verl": verl, "local": local,
            "watched_max_abs_delta": float(delta_l.abs().max()),
            "watched_max_abs_delta_difference": float((delta_v - delta_l).abs().max()),
        })
    report["seconds"] = time.perf_counter() - started
    (out_dir / "report.json").write_text(json.dumps(report, indent=1))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
