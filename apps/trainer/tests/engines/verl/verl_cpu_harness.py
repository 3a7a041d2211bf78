"""verl's own code on our data, on the CPU: the batch verl's actor receives, and its log-probs.

Run as a script (``python verl_cpu_harness.py OUT_DIR [--remove-padding] [--model qwen25]``) by
``test_verl_cpu_harness.py``, in a process of its own: verl picks its device platform once
per process, and this one must be the CPU platform of ``omni_verl_cpu.platform``.

What runs is verl 0.9.1's code, unchanged, with our registered classes:

1. rows of five modalities (text, image, audio, image+audio, video) written to an RL parquet
   and read by our ``data.custom_cls`` (:class:`OmniRLHFDataset`), collated by verl;
2. verl's ``AgentLoopWorker.generate_sequences`` -- the agent loop (media decoding through
   the dataset class, templating and tokenization with the worker's processor) and its
   postprocessing into the padded training batch (``multi_modal_inputs``,
   ``position_ids``) -- in our :class:`OmniAgentLoopWorker`. Only the rollout server is
   replaced: it answers each prompt with fixed tokens (vLLM-Omni needs a GPU);
3. verl's batch conversion (``left_right_2_no_padding``) and its FSDP2 engine
   (:class:`OmniFSDPEngine`: our adapter in verl's ``_build_module``, verl's FSDP2
   wrapping, ``infer_batch`` with its input preparation and model call) on one gloo
   process, in fp32;
4. the local engine (omni-training's ``Actor`` on the same rows through omni-data) on the
   same prompt and response tokens: the oracle.

``--model`` picks the tiny checkpoint: Qwen3-Omni (default) or Qwen2.5-Omni, whose package
plugs into the same verl classes with nothing changed outside it.

The JSON report holds, per row, what the test asserts; nothing is judged here.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESPONSE = [10, 20, 30, 40, 50, 60]
MODALITIES = ("text", "image", "audio", "image+audio", "video")


def write_rows(root: Path) -> str:
    sys.path.insert(0, str(HERE.parents[4] / "tests"))
    from test_data_qwen3_processor import write_modality_rows

    return str(write_modality_rows(root))


class FixedTokenServer:
    """Stands in for the vLLM-Omni server: every prompt gets :data:`RESPONSE`."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **media: Any) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        self.requests.append({"prompt_ids": list(prompt_ids), **{k: media.get(k) for k in ("image_data", "audio_data", "video_data")}})
        return TokenOutput(token_ids=list(RESPONSE), log_probs=[0.0] * len(RESPONSE), stop_reason="completed", extra_fields={})


def build_tiny(model: str, out_dir: Path) -> str:
    if model == "qwen25":
        from omni_qwen25.tiny import build_tiny_qwen25_omni

        return str(build_tiny_qwen25_omni(out_dir / "tiny", seed=0))
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    return str(build_tiny_qwen3_omni(out_dir / "tiny", seed=0))


def fsdp_engine(verl_config: Any, *, remove_padding: bool = False, micro_batch: int = 1) -> Any:
    """verl's FSDP2 engine for the config's actor (ours, by its model type) on one gloo
    process, initialized as verl's actor worker builds it (module, LoRA, FSDP wrapping,
    optimizer). Leaves the process group for the caller to destroy."""
    import torch
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.engine.base import EngineRegistry

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    model_config = omega_conf_to_dataclass(verl_config.actor_rollout_ref.model)
    actor_config = omega_conf_to_dataclass(verl_config.actor_rollout_ref.actor)
    engine_config = actor_config.engine
    engine_config.use_remove_padding = remove_padding  # as verl's TrainingWorker sets them
    engine_config.infer_micro_batch_size_per_gpu = micro_batch
    # verl's engine registry keys engines by device; ours is registered for the GPUs it runs
    # on. verl's own override variable selects that registration on this CPU.
    os.environ["VERL_ENGINE_DEVICE"] = "cuda"
    engine = EngineRegistry.new(
        model_type=model_config.model_type, backend=engine_config.strategy, model_config=model_config,
        engine_config=engine_config, optimizer_config=actor_config.optim, checkpoint_config=actor_config.checkpoint,
    )
    engine.initialize()
    return engine


def weight_sync_names(engine: Any) -> dict[str, list[str]]:
    """The parameter names the engine sends to the rollout at a weight sync (``sent``: ours, as
    verl's ``update_weights`` reads them) and those verl's own FSDP engine would send (``verl``)."""
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    sent, _ = engine.get_per_tensor_param()
    verls, _ = FSDPEngineWithLMHead.get_per_tensor_param(engine)
    return {"sent": [name for name, _ in sent], "verl": [name for name, _ in verls]}


def fsdp_log_probs(verl_config: Any, output: Any, *, remove_padding: bool) -> tuple[Any, Any]:
    """verl's FSDP2 engine (:func:`fsdp_engine`): the response log-probs of the agent-loop
    ``output`` batch, ``[B, T]``, as its actor worker computes them; with the engine."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    rows = len(output)
    engine = fsdp_engine(verl_config, remove_padding=remove_padding, micro_batch=rows)
    batch_td = left_right_2_no_padding(output.to_tensordict())
    tu.assign_non_tensor(
        batch_td, calculate_entropy=False, compute_loss=False, temperature=1.0, use_remove_padding=remove_padding,
        use_dynamic_bsz=False, micro_batch_size_per_gpu=rows,
    )
    with engine.eval_mode():
        result = engine.infer_batch(batch_td, loss_function=None)
    return engine, no_padding_2_padding(result["model_output"]["log_probs"], batch_td).float()


def pair_rows(processor: Any, inputs: dict[str, Any], modality: str, index: int) -> Any:
    """The offline preference batch of one pair (RESPONSE chosen and rejected) on ``inputs``'
    prompt, padded, as :func:`pair_batch` builds it for verl's actor."""
    from omni_trainer.prompts import Prepared
    from omni_trainer.preference_pairs import Pair
    from omni_trainer.engines.verl.preference import pair_batch

    pair = Pair(Prepared(inputs, "", "", index, {}), list(RESPONSE), list(RESPONSE), modality, index)
    tokenizer = processor.tokenizer
    return pair_batch([pair], processor, tokenizer.pad_token_id or 0)


def main(out_dir: Path, remove_padding: bool, model: str) -> None:
    sys.path.insert(0, str(HERE))
    from omni_verl_cpu.platform import use_cpu_platform

    use_cpu_platform()  # before any verl module asks for a device

    import torch
    from omegaconf import open_dict

    from omni_trainer.config import load_config
    from omni_verl.settings import SETTINGS_ENV
    from omni_trainer.engines.verl.translate import settings_for, to_verl_config

    out_dir.mkdir(parents=True, exist_ok=True)
    tiny = build_tiny(model, out_dir)
    data = write_rows(out_dir)
    config = load_config([
        f"actor_rollout_ref.model.path={tiny}", f"data.train_files=[{data}]", "trainer.engine=verl",
        "data.train_batch_size=5", "actor_rollout_ref.actor.ppo_mini_batch_size=5",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=5", "actor_rollout_ref.rollout.n=1",
        "data.max_prompt_length=512", f"data.max_response_length={len(RESPONSE) + 2}",
        "actor_rollout_ref.model.lora_rank=0", f"actor_rollout_ref.model.use_remove_padding={remove_padding}",
    ])
    verl_config = to_verl_config(config, lora_target_modules=None, lora_exclude_modules=None)
    settings = settings_for(config, tiny)
    os.environ[SETTINGS_ENV] = settings.to_env()
    with open_dict(verl_config):  # fp32 end to end: the comparison is exact up to kernel order
        verl_config.actor_rollout_ref.actor.fsdp_config.mixed_precision = {
            "param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32",
        }

    # 1-2. verl's dataset loading, collation, agent loop and postprocessing.
    from verl import DataProto
    from verl.utils.dataset.rl_dataset import collate_fn

    import omni_verl.external  # noqa: F401  (what VERL_USE_EXTERNAL_MODULES imports in every verl process)
    from omni_verl.agent_loop import OmniAgentLoopWorker
    from omni_verl.dataset import OmniRLHFDataset
    from omni_verl.processor import adapter_processor

    processor = adapter_processor(settings)
    dataset = OmniRLHFDataset([data], tokenizer=processor.tokenizer, config=verl_config.data, processor=processor)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    server = FixedTokenServer()
    worker = OmniAgentLoopWorker(verl_config, llm_client=server)
    output = asyncio.run(worker.generate_sequences(batch))

    # 3. verl's FSDP2 engine: log-probs of the batch exactly as its actor worker computes them.
    engine, verl_log_probs = fsdp_log_probs(verl_config, output, remove_padding=remove_padding)

    # 4. The local engine on the same rows and tokens.
    from omni_contracts import get_training_adapter
    from omni_training.actor import Actor
    from omni_training.batching import MicroBatch, collate
    from omni_training.policy_loss import PolicyLossConfig
    from omni_training.settings import NO_LORA, ActorSettings, OptimizerSettings

    hf_architecture = json.loads((Path(tiny) / "config.json").read_text())["architectures"][0]
    actor_settings = ActorSettings(
        loss_mode="gspo", policy_loss=PolicyLossConfig(loss_agg_mode="token-mean"), gradient_checkpointing=False
    )
    actor = Actor.from_pretrained(
        tiny, get_training_adapter(hf_architecture, "thinker"), settings=actor_settings, lora=NO_LORA,
        optim=OptimizerSettings(lr=1e-6),
    )
    # As the local trainer does, and verl's engine: the actor scores the rollout's masked distribution.
    from omni_contracts import get_rollout_adapter
    from omni_rollout.placeholders import policy_logit_mask

    rollout = config.actor_rollout_ref.rollout
    actor.mask_logits(policy_logit_mask(
        get_rollout_adapter(rollout.pipeline()), rollout.pipeline_mode, actor.model_config, processor, processor.tokenizer,
    ))

    report: dict[str, Any] = {
        "engine_class": type(engine).__name__, "module_class": type(engine.module).__name__,
        "policy_class": type(actor.model).__name__, "pipeline": config.actor_rollout_ref.rollout.pipeline(), "rows": [],
        "weight_sync": weight_sync_names(engine),
    }
    for i, modality in enumerate(MODALITIES):
        ours = dataset.dataset[i]
        mask = output.batch["attention_mask"][i].bool()
        prompt_width = output.batch["prompts"].shape[1]
        prompt_ids = output.batch["input_ids"][i][:prompt_width][mask[:prompt_width]]
        sequence = output.batch["input_ids"][i][mask]
        media = output.non_tensor_batch["multi_modal_inputs"][i]
        rope_kwargs = processor.get_rope_index_kwargs(media)
        expected_positions, _ = processor.get_rope_index(
            sequence[None], media.get("image_grid_thw"), media.get("video_grid_thw"), torch.ones_like(sequence)[None],
            **rope_kwargs,
        )
        positions = output.batch["position_ids"][i]
        inputs = {"input_ids": ours["input_ids"][None], "attention_mask": ours["attention_mask"][None], **ours["multi_modal_inputs"]}
        model_inputs, responses, response_mask = collate([inputs], [RESPONSE], pad_token_id=0)
        (local,) = actor.compute_log_probs([MicroBatch(model_inputs, responses, response_mask)])
        response_mask_verl = output.batch["response_mask"][i].bool()
        # The agent loop runs the rows concurrently: match the server's request by its prompt.
        (request,) = [r for r in server.requests if r["prompt_ids"] == prompt_ids.tolist()]
        pair = pair_rows(processor, inputs, modality, i)
        pair_mask = pair["attention_mask"][0].bool()
        pair_media = pair["multi_modal_inputs"][0]
        report["rows"].append({
            "modality": modality,
            "prompt_equals_dataset": prompt_ids.tolist() == ours["input_ids"].tolist(),
            "response": output.batch["responses"][i][response_mask_verl].tolist(),
            "media_keys_expected": sorted(ours["multi_modal_inputs"]),
            "media_keys": sorted(media),
            "media_equal": {
                k: bool(k in media and media[k].shape == v.shape and torch.equal(media[k], v))
                for k, v in ours["multi_modal_inputs"].items()
            },
            "server_media": {k: (len(v) if v is not None else 0) for k, v in request.items() if k != "prompt_ids"},
            "position_rows": int(positions.shape[0]),
            "positions_differing": int((positions[1:, mask] != expected_positions[:, 0]).any(0).sum()),
            "positions_total": int(mask.sum()),
            "text_positions_ok": positions[0, mask].tolist() == list(range(int(mask.sum()))),
            "local_log_probs": local[0].tolist(),
            # The offline preference batch (omni_trainer.engines.verl.preference.pair_batch) of the
            # same prompt with RESPONSE as its chosen answer, against the agent loop's row.
            "pair_tokens_equal": pair["input_ids"][0][pair_mask].tolist() == sequence.tolist(),
            "pair_positions_equal": torch.equal(pair["position_ids"][0][:, pair_mask], positions[:, mask]),
            "pair_response_mask_equal": pair["response_mask"][0][pair["response_mask"][0].bool()].tolist()
            == output.batch["response_mask"][i][response_mask_verl].tolist(),
            "pair_media_keys": sorted(pair_media),
            "pair_media_equal": {k: bool(k in pair_media and torch.equal(pair_media[k], v)) for k, v in media.items()},
            "verl_log_probs": verl_log_probs[i][response_mask_verl].tolist(),
        })
    (out_dir / "report.json").write_text(json.dumps(report, indent=1))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    # Each argument after the output folder is a variant, MODEL or MODEL:remove_padding. One
    # process runs them all (verl's imports cost more than a variant), each in a sub-folder;
    # <out>/report.json maps each variant to its report.
    root = Path(sys.argv[1])
    reports = {}
    for variant in sys.argv[2:] or ["qwen3"]:
        model, _, padding = variant.partition(":")
        main(root / variant.replace(":", "-"), remove_padding=padding == "remove_padding", model=model)
        reports[variant] = json.loads((root / variant.replace(":", "-") / "report.json").read_text())
    (root / "report.json").write_text(json.dumps(reports))
