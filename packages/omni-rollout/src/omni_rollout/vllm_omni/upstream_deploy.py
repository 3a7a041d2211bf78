"""vLLM-Omni's own deploy file for a pipeline, read as the base of a generated one.

A generated deploy config replaces vLLM-Omni's production file (``deploy/<name>`` in the
installed package; a rollout adapter names it with ``upstream_deploy_file``), so it starts
from that file's stages and keeps every per-stage setting it does not deliberately change
(``deploy_config.UPSTREAM_CHANGES``).

The file's ``platforms:`` section is resolved for CUDA, the one platform the verl engine
trains on: its ``cuda`` stage entries are applied as vLLM-Omni applies them at load time (a
key replaces the stage's; a sampling-parameter dict is merged into the stage's), and the
other platforms' entries are not carried. Carrying the section itself would not do: at load
time a platform's ``compilation_config`` replaces the stage's whole dict, which would drop the
policy's ``cudagraph_capture_sizes``.
"""

from __future__ import annotations

import copy
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PLATFORM = "cuda"
MERGED_BY_PLATFORMS = frozenset({"default_sampling_params", "default_pooling_params", "subtalker_sampling_params"})
"""Stage keys a platform entry merges into rather than replaces (vLLM-Omni's ``_DEEP_MERGE_KEYS``)."""


class UpstreamDeployError(ValueError):
    """vLLM-Omni's deploy file is missing or uses a layout this reader does not resolve."""


@dataclass(frozen=True)
class UpstreamDeploy:
    """The per-stage settings of one vLLM-Omni deploy file, on CUDA.

    Attributes:
        path: the file read.
        stages: settings by stage id, ``stage_id`` itself removed.
        connectors: the file's named connectors (stages refer to them in
            ``input_connectors``/``output_connectors``); empty when it has none.
    """

    path: Path
    stages: dict[int, dict[str, Any]]
    connectors: dict[str, Any]

    def stage(self, stage_id: int) -> dict[str, Any]:
        """A copy of one stage's settings (``{}`` when the file does not name the stage)."""
        return copy.deepcopy(self.stages.get(stage_id, {}))


def read_upstream_deploy(file_name: str) -> UpstreamDeploy | None:
    """vLLM-Omni's ``deploy/<file_name>`` resolved for CUDA; ``None`` when vLLM-Omni is not
    installed (the local engine: nothing will read a deploy config then).

    Raises:
        UpstreamDeployError: vLLM-Omni is installed but has no such file, or the file uses
            ``base_config`` inheritance or nested ``engine_args``/``runtime`` stage entries.
    """
    spec = importlib.util.find_spec("vllm_omni")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "deploy" / file_name
    if not path.is_file():
        raise UpstreamDeployError(f"vLLM-Omni has no deploy file {path}; fix the adapter's upstream_deploy_file.")
    import yaml  # transformers' dependency

    raw = yaml.safe_load(path.read_text()) or {}
    platform = ((raw.get("platforms") or {}).get(PLATFORM) or {}).get("stages") or []
    entries = list(raw.get("stages") or []) + list(platform)
    nested = sorted({key for entry in entries for key in ("engine_args", "runtime") if key in entry})
    if "base_config" in raw or nested:
        raise UpstreamDeployError(
            f"{path} uses {['base_config'] if 'base_config' in raw else nested}, which the deploy-config "
            "generator does not resolve; flatten the file or extend omni_rollout.vllm_omni.upstream_deploy."
        )
    stages = {int(entry["stage_id"]): {k: v for k, v in entry.items() if k != "stage_id"}
              for entry in raw.get("stages") or []}
    for entry in platform:
        stage = stages.setdefault(int(entry["stage_id"]), {})
        for key, value in entry.items():
            if key == "stage_id":
                continue
            if key in MERGED_BY_PLATFORMS and isinstance(value, dict) and isinstance(stage.get(key), dict):
                stage[key] = {**stage[key], **value}
            else:
                stage[key] = value
    return UpstreamDeploy(path=path, stages=stages, connectors=dict(raw.get("connectors") or {}))
