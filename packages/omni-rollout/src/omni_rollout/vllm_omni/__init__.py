"""vLLM-Omni rollout backend (gpu extra) for verl's server path
(``omni_verl.rollout``): deploy configs, device placement, prompts, output
conversion and the one ``AsyncOmni`` driver (``driver``) that verl's vLLM server runs as its
engine.

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
from omni_rollout.vllm_omni.outputs import (
    ConvertedRequest,
    convert_request,
    stage_output_from_engine,
)
from omni_rollout.vllm_omni.prompt_logprobs import PromptLogprobsError, check_prompt_logprobs
from omni_rollout.vllm_omni.prompts import build_engine_prompt, dedup_function

__all__ = [
    "ConvertedRequest",
    "DeployConfigError",
    "DeployOptions",
    "DevicePlacementError",
    "EngineOutputError",
    "PromptLogprobsError",
    "ReplicaLayout",
    "StageRpcError",
    "StagePlacement",
    "UnsupportedByVllmOmniError",
    "VllmOmniDriver",
    "build_deploy_config",
    "build_engine_prompt",
    "check_prompt_logprobs",
    "convert_request",
    "dedup_function",
    "physical_devices",
    "place_stages",
    "render_deploy_config",
    "stage_output_from_engine",
    "start_async_omni",
    "write_deploy_config",
]
