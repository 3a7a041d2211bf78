"""vLLM-Omni rollout backend (gpu extra): deploy configs, device placement, prompts,
output conversion, weight-sync plans and payloads, and the engine wrapper.

Only ``engine`` touches vLLM-Omni, and only inside its methods, so every other module here
is importable and tested on CPU.
"""

from omni_rollout.vllm_omni.deploy_config import (
    DeployConfigError,
    DeployOptions,
    build_deploy_config,
    render_deploy_config,
    write_deploy_config,
)
from omni_rollout.vllm_omni.devices import (
    DevicePlacementError,
    ReplicaLayout,
    StagePlacement,
    physical_devices,
    place_stages,
)
from omni_rollout.vllm_omni.engine import (
    EngineNotStartedError,
    EnginePausedError,
    EngineRequest,
    PolicySampling,
    ServedLora,
    VllmOmniEngine,
)
from omni_rollout.vllm_omni.loop_thread import LoopThread
from omni_rollout.vllm_omni.outputs import (
    ConvertedRequest,
    convert_request,
    stage_output_from_engine,
)
from omni_rollout.vllm_omni.prompts import build_engine_prompt, dedup_function
from omni_rollout.vllm_omni.weight_payloads import (
    FullWeights,
    LoraWeights,
    PayloadError,
    stage_full,
    stage_lora,
)
from omni_rollout.vllm_omni.weight_sync import (
    SyncStep,
    WeightSyncError,
    WeightSyncPlan,
    plan_weight_sync,
)

__all__ = [
    "ConvertedRequest",
    "DeployConfigError",
    "DeployOptions",
    "DevicePlacementError",
    "EngineNotStartedError",
    "EnginePausedError",
    "EngineRequest",
    "FullWeights",
    "LoopThread",
    "LoraWeights",
    "PayloadError",
    "PolicySampling",
    "ReplicaLayout",
    "ServedLora",
    "StagePlacement",
    "SyncStep",
    "VllmOmniEngine",
    "WeightSyncError",
    "WeightSyncPlan",
    "build_deploy_config",
    "build_engine_prompt",
    "convert_request",
    "dedup_function",
    "physical_devices",
    "place_stages",
    "plan_weight_sync",
    "render_deploy_config",
    "stage_full",
    "stage_lora",
    "stage_output_from_engine",
    "write_deploy_config",
]
