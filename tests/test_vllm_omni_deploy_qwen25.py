"""Golden deploy configs for Qwen2.5-Omni's pipeline modes (two vLLM-Omni pipelines).

The goldens live in packages/omni-rollout/tests/golden/; vLLM-Omni's own loader reads them
in packages/omni-qwen25/tests/test_vllm_omni_pipeline.py (gpu extra). When a change is
intended, regenerate them explicitly and review the diff:

    uv run --frozen python tests/test_vllm_omni_deploy_qwen25.py --regenerate
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from omni_contracts import get_rollout_adapter
from omni_rollout.vllm_omni.deploy_config import DeployOptions, build_deploy_config, render_deploy_config
from omni_rollout.vllm_omni.devices import ReplicaLayout

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "packages/omni-rollout/tests/golden"
MODES = ("thinker_only", "full")

# Replica 1 of 2 on a 4-GPU node, 2 GPUs each, thinker at TP 1: the thinker takes device 2,
# talker and token2wav the replica's other device 3. The audio recipe's knobs.
LAYOUT = ReplicaLayout(replica_rank=1, num_replicas=2, gpus_per_replica=2, num_visible_devices=4)
OPTIONS = DeployOptions(
    gpu_memory_utilization=0.7,
    max_num_seqs=256,
    max_model_len=4160 + 2048,
    cudagraph_capture_sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256),
    enable_lora=True,
    max_lora_rank=32,
)


def golden_path(mode: str) -> Path:
    return GOLDEN_DIR / f"qwen2_5_omni_{mode}.json"


def generate(mode: str) -> str:
    return render_deploy_config(build_deploy_config(get_rollout_adapter("qwen2_5_omni"), mode, LAYOUT, OPTIONS))


@pytest.mark.parametrize("mode", MODES)
def test_deploy_config_matches_golden(mode: str) -> None:
    if mode != "thinker_only" and importlib.util.find_spec("vllm_omni") is None:
        pytest.skip("the full-mode deploy config reads vLLM-Omni's defaults: uv sync --extra gpu")
    path = golden_path(mode)
    if not path.exists():
        pytest.fail(f"{path} is missing; run `python {__file__} --regenerate` and review it.")
    assert generate(mode) == path.read_text(), (
        f"The deploy config for {mode!r} changed. If intended, run "
        f"`python {Path(__file__).name} --regenerate` and review the diff."
    )


def test_hand_checked_facts_of_the_goldens() -> None:
    adapter = get_rollout_adapter("qwen2_5_omni")
    thinker_only = build_deploy_config(adapter, "thinker_only", LAYOUT, OPTIONS)
    assert thinker_only["pipeline"] == "qwen2_5_omni_thinker_only"
    (thinker,) = thinker_only["stages"]
    assert thinker["devices"] == "2" and thinker["hf_overrides"] == {"enable_audio_output": False}
    full = build_deploy_config(adapter, "full", LAYOUT, OPTIONS)
    assert full["pipeline"] == "qwen2_5_omni"
    assert [s["devices"] for s in full["stages"]] == ["2", "3", "3"]
    # The thinker has device 2 to itself; talker and token2wav split device 3's 0.7 as vLLM-Omni's
    # own shares 0.8 : 0.15, rounded down to 1e-4: 0.7 * 0.8 / 0.95 = 0.58947 and 0.7 * 0.15 / 0.95 = 0.11052.
    assert [s["gpu_memory_utilization"] for s in full["stages"]] == [0.7, 0.5894, 0.1105]
    # vLLM-Omni runs Qwen2.5-Omni's thinker eager on CUDA; the policy knobs keep it so.
    assert full["stages"][0]["enforce_eager"] is True and full["stages"][0]["mm_processor_cache_gb"] == 0


def regenerate() -> None:
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    for mode in MODES:
        golden_path(mode).write_text(generate(mode))
        print(f"wrote {golden_path(mode)}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        raise SystemExit(f"usage: python {sys.argv[0]} --regenerate")
    regenerate()
