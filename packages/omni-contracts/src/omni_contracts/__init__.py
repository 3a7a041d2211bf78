"""Contracts between omni-rl and its model packages.

Light by design: importing this package loads no torch and no transformers, so a model
package can be contract-checked in milliseconds. See ``omni_contracts.testing`` for the
kit a model package runs from its own tests.
"""

from omni_contracts.errors import (
    AdapterNotFoundError,
    CheckpointError,
    CheckpointFileNotFoundError,
    ContractViolation,
    ExtraFieldError,
    ModelPackageImportError,
    OmniContractError,
    RegistrationError,
    SchemaError,
    UnknownModeError,
    UnknownNameError,
)
from omni_contracts.extra_fields import ExtraFieldSpec, is_namespaced, validate_extra_fields
from omni_contracts.plugins import MODEL_ENTRY_POINT_GROUP, ModelPackage, ModelPackageLoader
from omni_contracts.registry import AdapterRegistry, Registry
from omni_contracts.rollout_adapter import (
    LogitMask,
    RolloutAdapter,
    check_engine_prompt,
    get_rollout_adapter,
    rollout_adapters,
)
from omni_contracts.sample import RolloutSample, StageOutput, collate_extra_fields
from omni_contracts.thinker_processor import OmniProcessor, load_processor, require_omni_processor, require_usable_tokenizer
from omni_contracts.topology import OUTPUT_TYPES, OutputType, StageConfig, validate_stage_topology
from omni_contracts.training_adapter import (
    MODALITIES,
    RESPONSE_LENGTHS_KEY,
    STAGES,
    Stage,
    TrainingAdapter,
    architecture_of,
    get_training_adapter,
    resolve_training_adapter,
    strip_submodules,
    training_adapters,
)

__all__ = [
    "MODALITIES",
    "MODEL_ENTRY_POINT_GROUP",
    "OUTPUT_TYPES",
    "RESPONSE_LENGTHS_KEY",
    "STAGES",
    "AdapterNotFoundError",
    "AdapterRegistry",
    "CheckpointError",
    "CheckpointFileNotFoundError",
    "ContractViolation",
    "ExtraFieldError",
    "ExtraFieldSpec",
    "LogitMask",
    "ModelPackage",
    "ModelPackageImportError",
    "ModelPackageLoader",
    "OmniContractError",
    "OmniProcessor",
    "OutputType",
    "RegistrationError",
    "Registry",
    "UnknownNameError",
    "RolloutAdapter",
    "RolloutSample",
    "SchemaError",
    "Stage",
    "StageConfig",
    "StageOutput",
    "TrainingAdapter",
    "UnknownModeError",
    "architecture_of",
    "check_engine_prompt",
    "collate_extra_fields",
    "get_rollout_adapter",
    "get_training_adapter",
    "is_namespaced",
    "load_processor",
    "require_omni_processor",
    "require_usable_tokenizer",
    "resolve_training_adapter",
    "rollout_adapters",
    "strip_submodules",
    "training_adapters",
    "validate_extra_fields",
    "validate_stage_topology",
]
