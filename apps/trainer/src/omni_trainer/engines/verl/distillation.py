"""On-policy distillation under verl: our ``distillation.*`` -> verl's, checked before Ray.

verl 0.9.1 runs the teacher as rollout servers of ``teacher_models.teacher_model.inference.name``
(by default the student's rollout name, so our ``vllm_omni`` replica) on a GPU pool of its
own (``distillation.nnodes`` x ``distillation.n_gpus_per_node``). Each agent loop sends the
student's prompt + sampled response, with the same media, to a teacher server as a
``max_tokens=1`` request with ``prompt_logprobs`` (0: the sampled tokens only; k: the top-k
for ``forward_kl_topk``); the actor then adds verl's distillation loss to the policy loss.

What differs from the local engine:

- ``teacher_model.log_prob_micro_batch_size_per_gpu`` and ``param_offload=true`` are refused
  when given (the teacher is a vLLM-Omni server sized by ``teacher_model.inference.*``;
  :mod:`omni_trainer.engines.verl.local_keys`).
- ``forward_kl_topk`` is refused: verl's ``DistillationTeacherModelConfig`` accepts top-k
  teacher log-probs only from its ``vllm`` and ``sglang`` servers (it raises
  ``NotImplementedError`` for any other inference name), although our server returns them.
- A missing ``clip_ratio_low/high`` becomes ``clip_ratio`` (verl's fields are not optional).

Importing this module needs neither verl nor torch: the verl-side validation imports verl
inside :func:`validate_with_verl`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from omni_trainer.config import Config, ConfigError
from omni_trainer.engines.verl.tasks import cpu_rollout_name

VERL_TOPK_MODES = ("forward_kl_topk",)
DIRECT_LOSS_REFUSED = ("kl", "k1")


def distillation_values(config: Config) -> dict[str, Any]:
    """verl's ``distillation.*`` keys for ``config`` (none when distillation is off, so verl's
    defaults stay as they are)."""
    distillation = config.distillation
    if not distillation.enabled:
        return {}
    loss = distillation.distillation_loss
    teacher = distillation.teacher_models.teacher_model
    prefix = "distillation.distillation_loss."
    return {
        "distillation.enabled": True,
        "distillation.n_gpus_per_node": distillation.n_gpus_per_node,
        "distillation.nnodes": distillation.nnodes,
        prefix + "loss_mode": loss.loss_mode,
        prefix + "topk": loss.topk,
        prefix + "use_task_rewards": loss.use_task_rewards,
        prefix + "distillation_loss_coef": loss.distillation_loss_coef,
        prefix + "loss_max_clamp": loss.loss_max_clamp,
        prefix + "log_prob_min_clamp": loss.log_prob_min_clamp,
        prefix + "use_policy_gradient": loss.use_policy_gradient,
        prefix + "clip_ratio": loss.clip_ratio,
        prefix + "clip_ratio_low": loss.clip_ratio if loss.clip_ratio_low is None else loss.clip_ratio_low,
        prefix + "clip_ratio_high": loss.clip_ratio if loss.clip_ratio_high is None else loss.clip_ratio_high,
        "distillation.teacher_models.teacher_model.model_path": teacher.model_path,
        "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size": (
            teacher.inference.tensor_model_parallel_size
        ),
        "distillation.teacher_models.teacher_model.inference.gpu_memory_utilization": (
            teacher.inference.gpu_memory_utilization
        ),
        "distillation.teacher_models.teacher_model.inference.max_model_len": teacher.inference.max_model_len,
    }


def distillation_problems(config: Config) -> list[str]:
    """Why ``config``'s distillation cannot run on verl (cheap checks, no verl import)."""
    distillation = config.distillation
    if not distillation.enabled:
        return []
    loss = distillation.distillation_loss
    inference = distillation.teacher_models.teacher_model.inference
    problems = []
    if loss.loss_mode in VERL_TOPK_MODES:
        problems.append(
            f"distillation.distillation_loss.loss_mode={loss.loss_mode} needs top-k teacher log-probs, which "
            "verl 0.9.1 takes only from its own vllm/sglang teacher servers, not vllm_omni; use "
            "loss_mode=kl (use_policy_gradient=true) or k3, or trainer.engine=local"
        )
    if not loss.use_policy_gradient and loss.loss_mode in DIRECT_LOSS_REFUSED:
        problems.append(
            f"distillation.distillation_loss.loss_mode={loss.loss_mode} with use_policy_gradient=false has a "
            "gradient that ignores the teacher; set use_policy_gradient=true or loss_mode=k3"
        )
    pool = distillation.n_gpus_per_node * distillation.nnodes
    tp = inference.tensor_model_parallel_size
    if pool <= 0:
        problems.append(
            "distillation.nnodes and distillation.n_gpus_per_node must be > 0 (the teacher's own GPU pool)"
        )
    elif tp <= 0 or pool % tp:
        problems.append(
            f"the teacher pool ({distillation.nnodes} x {distillation.n_gpus_per_node} GPUs) is not a multiple "
            f"of distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size={tp}"
        )
    served = cpu_rollout_name(config) if config.trainer.device == "cpu" else config.actor_rollout_ref.rollout.name
    if inference.name is not None and inference.name != served:
        problems.append(
            f"distillation.teacher_models.teacher_model.inference.name={inference.name}: the teacher is served by "
            f"the student's rollout here ({served}), with the student's pipeline; drop it or name {served}"
        )
    max_len = inference.max_model_len
    needed = config.data.max_prompt_length + config.data.max_response_length + 1
    if max_len is not None and max_len < needed:
        problems.append(
            f"distillation.teacher_models.teacher_model.inference.max_model_len={max_len} cannot hold the "
            f"student's prompt + response + 1 ({needed} tokens)"
        )
    return problems


def validate_with_verl(verl_config: DictConfig) -> None:
    """Build verl's ``DistillationConfig`` from the translated config, as verl's trainer does
    inside Ray, so its own checks fail here instead.

    Raises:
        ConfigError: verl refused the section (its message included).
    """
    from hydra.errors import InstantiationException
    from verl.utils.config import omega_conf_to_dataclass

    if not verl_config.distillation.enabled:
        return
    try:
        omega_conf_to_dataclass(verl_config.distillation)
    except (InstantiationException, ValueError, NotImplementedError) as exc:
        reason = exc.__cause__ or exc  # Hydra wraps the dataclass's own error
        raise ConfigError(f"Invalid configuration:\n  - distillation (verl refuses it): {reason}") from exc


def check_teacher_tokenizer(config: Config, student_path: str) -> None:
    """Load both tokenizers through their training adapters' ``configure_tokenizer`` and
    compare them (vocabulary size, special tokens, a sample encoding), before any compute.

    Raises:
        ConfigError: the teacher's tokenizer differs from the student's, or the teacher
            checkpoint has no ``config.json``.
    """
    if not config.distillation.enabled:
        return
    from omni_training.distillation import DistillationConfigError, check_shared_tokenizer

    teacher_path = config.distillation.teacher_models.teacher_model.model_path
    assert teacher_path is not None  # load_config refuses distillation without a teacher path
    student = _adapter_tokenizer(student_path, config.actor_rollout_ref.model.stage, "actor_rollout_ref.model.path")
    teacher = _adapter_tokenizer(
        teacher_path, config.actor_rollout_ref.model.stage, "distillation.teacher_models.teacher_model.model_path"
    )
    try:
        check_shared_tokenizer(student, teacher)
    except DistillationConfigError as exc:
        raise ConfigError(
            f"Invalid configuration:\n  - distillation.teacher_models.teacher_model.model_path={teacher_path}: {exc}"
        ) from exc


def _adapter_tokenizer(model_path: str, stage: str, key: str) -> Any:
    from transformers import AutoConfig

    from omni_contracts import resolve_training_adapter

    if not (Path(model_path) / "config.json").is_file():
        raise ConfigError(f"{key}={model_path} has no config.json; point it at a Hugging Face checkpoint directory.")
    hf_config = AutoConfig.from_pretrained(model_path)
    return resolve_training_adapter(hf_config, stage).configure_tokenizer(model_path, hf_config)
