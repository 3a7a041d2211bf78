"""vLLM-Omni rollout backend (gpu extra): deploy configs, device placement, prompts,
output conversion, weight-sync plans and payloads, the one ``AsyncOmni`` driver (``driver``,
used by verl's server and by ``engine``) and the synchronous engine wrapper.

Only ``driver`` touches vLLM-Omni (its undocumented parts through ``compat``), and only inside
its functions, so every module here is importable and tested on CPU.
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
from omni_rollout.vllm_omni.driver import (
    EngineOutputError,
    StageRpcError,
    UnsupportedByVllmOmniError,
    VllmOmniDriver,
    start_async_omni,
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
from omni_rollout.vllm_omni.prompt_logprobs import PromptLogprobsError, check_prompt_logprobs
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
    "EngineOutputError",
    "EnginePausedError",
    "EngineRequest",
    "FullWeights",
    "LoopThread",
    "LoraWeights",
    "PayloadError",
    "PolicySampling",
    "PromptLogprobsError",
    "ReplicaLayout",
    "ServedLora",
    "StageRpcError",
    "StagePlacement",
    "SyncStep",
    "UnsupportedByVllmOmniError",
    "VllmOmniDriver",
    "VllmOmniEngine",
    "WeightSyncError",
    "WeightSyncPlan",
    "build_deploy_config",
    "build_engine_prompt",
    "check_prompt_logprobs",
    "convert_request",
    "dedup_function",
    "physical_devices",
    "place_stages",
    "plan_weight_sync",
    "render_deploy_config",
    "stage_full",
    "stage_lora",
    "stage_output_from_engine",
    "start_async_omni",
    "write_deploy_config",
]
