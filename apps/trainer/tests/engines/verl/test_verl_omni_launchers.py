"""verl-omni's Qwen3-Omni launchers carry over: every Hydra override they pass is a key here.

The launchers' overrides are short extracts (``verl_omni_launchers/*.overrides``, verl-omni
a1139baf), expanded by bash as the scripts expand them (quotes, ``${VAR}``, ``$((...))``).

- verl engine: each key reaches verl's config with the launcher's value at verl's path, except
  where omni-rl does that job its own way (:data:`OWN_WAY_ON_VERL`: verl-omni's dataset class,
  a hand-written deploy file), which the pre-flight names. A reward-function file reaches our
  reward function in verl's slot (:data:`AT_VERL`).
- local engine: each key is honoured, or refused by name, one problem per key
  (:mod:`omni_trainer.engines.local.verl_keys`).

Needs verl's packaged config (the distributed extra); verl itself is not imported.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from omegaconf import OmegaConf

from omni_trainer.config import LIST_KEYS, Config, ConfigError, load_config
from omni_trainer.engines import engine_for
from omni_trainer.findings import Findings
from omni_trainer.preflight import COMMON_CHECKS, preflight
from omni_trainer.keys import help_text, value_at
from omni_trainer.engines.local.verl_keys import verl_key

if importlib.util.find_spec("verl") is None:  # pragma: no cover
    pytest.skip("needs the distributed extra (uv sync --extra distributed --extra gpu)", allow_module_level=True)

from omni_trainer.engines.verl import launch  # noqa: E402
from omni_verl.settings import SETTINGS_ENV  # noqa: E402
from omni_trainer.engines.verl.translate import to_verl_config  # noqa: E402
from omni_trainer.resolved import resolve_run

LAUNCHERS = sorted((Path(__file__).parent / "verl_omni_launchers").glob("*.overrides"))
REFUSED_LAUNCHERS = sorted((Path(__file__).parent / "verl_omni_launchers" / "refused").glob("*.overrides"))
"""Launchers of engines or features omni-rl does not have (Megatron, VeOmni, NPUs, verl's V1
asynchronous modes, a judge, DAPO, NitroBrew): each such key is refused by name with why and
what to use instead; the rest are taken."""
EXCLUDE_MODULES = ".*talker.*|.*code2wav.*|.*code_predictor.*|.*visual.*|.*audio_tower.*"
REWARD_FILES = ("verl_omni/utils/reward_score/mmk12_reward.py", "verl_omni/utils/reward_score/choice_reward.py",
                "verl_omni/utils/reward_score/omnivideo_qi.py", "verl_omni/utils/reward_score/audio_mcq.py")
EXTERNAL_LIB = "verl_omni/models/transformers/qwen3_omni_thinker.py"
"""Stand-ins for the files of a verl-omni checkout the launchers name (verl imports the
``external_lib`` module in its workers; the pre-flight checks that it can)."""
OWN_WAY_ON_VERL = {
    "data.custom_cls.path": "data.custom_cls",  # omni-data's dataset is the one (a warning for verl-omni's)
    "data.custom_cls.name": "data.custom_cls",
    "actor_rollout_ref.rollout.engine_kwargs.vllm_omni.stage_configs_path":
        "actor_rollout_ref.rollout.engine_kwargs.vllm_omni.stage_configs_path",  # the deploy file is generated
}
"""Launcher keys whose job omni-rl does its own way on verl -> what the pre-flight's message names."""
REFUSED_ON_BOTH = ("actor_rollout_ref.rollout.engine_kwargs.vllm_omni.stage_configs_path",)
AT_VERL: dict[str, Callable[[Any, Any], Any]] = {
    "trainer.logger": lambda verl, settings: verl.trainer.logger[:-1],  # ours adds verl's "file" logger last
    "actor_rollout_ref.model.lora_dtype": lambda verl, settings: settings["lora_dtype"],  # verl-omni's key: our engine
    # The user's file and function, called by ours in verl's slot (the path made absolute).
    "reward.custom_reward_function.path":
        lambda verl, settings: os.path.relpath(verl.reward.custom_reward_function.reward_kwargs.custom_path),
    "reward.custom_reward_function.name": lambda verl, settings: verl.reward.custom_reward_function.reward_kwargs.custom_name,
    # verl-omni's spellings, folded into ours (KEY_ALIASES), which reach verl at their own paths.
    "actor_rollout_ref.rollout.engine_kwargs.vllm_omni.max_num_seqs":
        lambda verl, settings: verl.actor_rollout_ref.rollout.max_num_seqs,
}
"""Where a launcher value lands when it is not verl's config at the key's own path."""
DIFFERENT_ON_PURPOSE = {"trainer.total_epochs": "the steps govern and the passes repeat past total_epochs"}
"""Launcher keys taken with a meaning of ours, each with what its help text says of it."""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny checkpoint, gsm8k-sourced parquet files and the launchers' reward files."""
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    directory = tmp_path_factory.mktemp("launchers")
    (directory / "model").symlink_to(build_tiny_qwen3_omni())
    for folder in (directory, *(directory / modality for modality in ("image", "video", "audio"))):
        folder.mkdir(exist_ok=True)
        for name in ("train", "test"):
            pq.write_table(pa.table({"data_source": ["openai/gsm8k"] * 256, "prompt": ["q"] * 256}),
                           folder / f"{name}.parquet")
    for reward in REWARD_FILES:
        (directory / reward).parent.mkdir(parents=True, exist_ok=True)
        (directory / reward).write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                                        "    return 0.0\n")
    (directory / EXTERNAL_LIB).parent.mkdir(parents=True)
    (directory / EXTERNAL_LIB).write_text("")
    return directory


@pytest.fixture(autouse=True)
def in_workdir(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workdir)  # the launchers name their reward files relative to the checkout
    monkeypatch.syspath_prepend(str(workdir))
    # verl's own checks import verl (~25 s); test_verl_launch_cpu.py covers them.
    monkeypatch.setattr(launch, "verl_problems", lambda config: [])


MODALITY_FILES = {
    "TRAIN_FILES": "['{w}/image/train.parquet','{w}/video/train.parquet','{w}/audio/train.parquet']",
    "VAL_FILES": "['{w}/image/test.parquet','{w}/video/test.parquet','{w}/audio/test.parquet']",
    "IMAGE_RATIO": "1.0", "VIDEO_RATIO": "1.0", "AUDIO_RATIO": "1.0",
}
RUN_DIR = {"RUN_DIR": "{w}/launcher_run", "TENSORBOARD_DIR": "{w}/launcher_run/tensorboard",
           "CUDA_DEVICE_MAX_CONNECTIONS": "1"}  # what the scripts export ({oc.env:...} values read them)
OPD = {"STUDENT_MODEL": "{w}/model", "TEACHER_MODEL": "{w}/model", "N_GPUS_PER_NODE": "16",
       "TEACHER_N_GPUS_PER_NODE": "16"}
LAUNCHER_ENV: dict[str, dict[str, str]] = {
    "run_qwen3_omni_thinker_gspo_npu_nextqa_v1": {"N_GPUS_PER_NODE": "16", "NNODES": "1", "TOTAL_TRAINING_STEPS": "200",
                                                  "USE_AUDIO_IN_VIDEO": "true", "TOTAL_NPUS": "16"},
    "run_qwen3_omni_megatron_audiomcq_separate_async": RUN_DIR,
    "run_qwen3_omni_megatron_avqa_separate_async": {**RUN_DIR, "ROLLOUT_GPUS": "4", "MAX_PROMPT_LENGTH": "4096",
                                                    "MAX_RESPONSE_LENGTH": "2048", "TOTAL_TRAINING_STEPS": "150",
                                                    "TEST_FREQ": "30"},
    "run_qwen3_omni_megatron_avqa_video_separate_async": {**RUN_DIR, "ROLLOUT_GPUS": "4"},
    "run_qwen3_omni_megatron_geo3k_separate_async": RUN_DIR,
    "run_qwen3_omni_thinker_geo3k_megatron_fully_async": {
        "NNODES": "4", "TRAIN_GPUS_PER_NODE": "4", "ROLLOUT_GPUS_PER_NODE": "4", "TOTAL_TRAINING_STEPS": "150",
        "TOTAL_EPOCHS": "2", "PPO_MINI_BATCH_SIZE": "16", "N_RESP_PER_PROMPT": "8", "TOTAL_ROLLOUT_STEPS": "2400",
        "RAY_ADDRESS": "auto"},
    "run_qwen3_omni_thinker_gspo_lora_mmk12_v1_opd": OPD,
    "run_qwen3_omni_thinker_gspo_lora_mmk12_v1_opd_npu": OPD,
    "run_qwen3_omni_thinker_gspo_lora_mmk12_v1_nitrobrew_opd_npu": OPD,
    "run_qwen3_omni_thinker_gspo_npu_omnivideo_qi_v1": {
        "REWARD_TP": "8", "REWARD_NUM_WORKERS": "2", "REWARD_GPU_MEMORY_UTILIZATION": "0.4", "TRAIN_BATCH_SIZE": "32",
        "PPO_MINI_BATCH_SIZE": "16", "ROLLOUT_N": "8", "OMNIVIDEO_QI_JUDGE_MODEL": "Qwen/Qwen3-VL-8B-Instruct",
        "REWARD_MODEL_ENABLE": "true"},
    "run_qwen3_omni_thinker_gspo_veomni": {"NNODES": "2", "ACTOR_EP": "8", "ATTN_IMPL": "flash_attention_2",
                                           "MOE_IMPL": "fused_triton"},
    "run_qwen3_omni_omni_preference_lora": {
        **MODALITY_FILES, "TRAIN_BATCH_SIZE": "32", "VAL_BATCH_SIZE": "32", "VAL_MAX_SAMPLES": "96",
        "TOTAL_TRAINING_STEPS": "200", "ATTN_IMPLEMENTATION": "sdpa", "LORA_RANK": "32", "LORA_ALPHA": "64",
        "LORA_DROPOUT": "0.05", "LORA_TARGET_MODULES": '["q_proj","k_proj","v_proj","o_proj"]',
        "LORA_TARGET_PARAMS": '["gate_up_proj","down_proj"]', "LR": "1.0e-6", "PPO_MINI_BATCH_SIZE": "8",
        "PPO_MICRO_BATCH_SIZE_PER_GPU": "2", "TEST_FREQ": "50", "SAVE_FREQ": "50"},
    "run_qwen3_omni_thinker_only_offline_mllm_dpo": {
        **MODALITY_FILES, "TRAIN_BATCH_SIZE": "8", "IMAGE_MAX_PIXELS": "262144", "DPO_BETA": "0.1", "LR": "1.0e-6",
        "PPO_MINI_BATCH_SIZE": "8", "PPO_MICRO_BATCH_SIZE_PER_GPU": "1", "NUM_GPUS_ACTOR": "8",
        "TOTAL_TRAINING_STEPS": "1000"},
    "run_qwen3_omni_thinker_only_offline_mllm_dpo_lora": {
        **MODALITY_FILES, "DPO_BETA": "0.1", "LR": "1.0e-6", "PPO_MINI_BATCH_SIZE": "4",
        "PPO_MICRO_BATCH_SIZE_PER_GPU": "1", "NUM_GPUS_ACTOR": "8", "TOTAL_TRAINING_STEPS": "1000"},
}
"""A launcher's own shell variables, with its script's defaults (``{w}``: the test directory)."""


def launcher_overrides(launcher: Path, workdir: Path) -> list[str]:
    """The launcher's overrides as its script passes them, its shell variables set here."""
    lines = [line for line in launcher.read_text().splitlines() if line and not line.startswith("#")]
    env = {
        **os.environ, "MODEL_PATH": str(workdir / "model"), "TRAIN_FILE": str(workdir / "train.parquet"),
        "VAL_FILE": str(workdir / "test.parquet"), "DATA_DIR": str(workdir), "EXCLUDE_MODULES": EXCLUDE_MODULES,
        "NUM_GPUS": "2", "TOTAL_TRAIN_STEPS": "2", "ROLLOUT_TP": "2", "NUM_GPUS_ACTOR_ROLLOUT_REWARD": "16",
        "REWARD_FUNCTION_PATH": REWARD_FILES[0], "STAGE_CONFIG": str(workdir / "stage.yaml"),
        **{name: value.format(w=workdir) for name, value in LAUNCHER_ENV.get(launcher.stem, {}).items()},
    }
    script = "set -eu\nprintf '%s\\n' " + " ".join(lines)
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=True).stdout.splitlines()


def split(override: str) -> tuple[str, Any]:
    key, _, raw = override.partition("=")
    key = key.lstrip("+")
    value = yaml.safe_load(raw) if raw else ""
    return key, [value] if key in LIST_KEYS and isinstance(value, str) else value


def same(expected: Any, actual: Any) -> bool:
    """The launcher's value (as YAML reads it: ``3e-4`` is a string there) and verl's."""
    if isinstance(actual, float) and isinstance(expected, (str, int)) and not isinstance(expected, bool):
        return float(expected) == actual
    return bool(expected == actual)


def findings(config: Config) -> tuple[list[str], list[str]]:
    """The pre-flight's ``(problems, warnings)``: its checks, run as :func:`preflight` runs them
    (which raises the problems and drops the warnings when there are any)."""
    found = Findings()
    run = resolve_run(config)
    for check in (*COMMON_CHECKS, *engine_for(config.trainer.engine).checks):
        check(run, found)
    if not found.problems:
        assert preflight(run) == found.warnings
    return found.problems, found.warnings


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda path: path.stem)
def test_every_key_reaches_verl_with_the_launchers_value(launcher: Path, workdir: Path) -> None:
    overrides = launcher_overrides(launcher, workdir)
    config = load_config(overrides + ["trainer.engine=verl", f"trainer.default_local_dir={workdir / 'run'}"])
    verl = to_verl_config(config, lora_target_modules=None, lora_exclude_modules=None)
    settings = json.loads(verl.ray_kwargs.ray_init.runtime_env.env_vars[SETTINGS_ENV])
    problems, warnings = findings(config)
    missing = []
    for key, expected in map(split, overrides):
        if key in DIFFERENT_ON_PURPOSE:
            assert DIFFERENT_ON_PURPOSE[key] in (help_text(Config, key) or ""), key
            continue
        if key in OWN_WAY_ON_VERL:
            assert any(OWN_WAY_ON_VERL[key] in line for line in problems + warnings), (key, problems, warnings)
            continue
        at = AT_VERL.get(key)
        actual = at(verl, settings) if at else OmegaConf.select(verl, key, default="<absent>")
        actual = OmegaConf.to_container(actual) if OmegaConf.is_config(actual) else actual
        if not same(expected, actual):
            missing.append((key, expected, actual))
    assert missing == []
    # What the pre-flight refuses, it refuses by a launcher key's name.
    launcher_keys = {split(o)[0] for o in overrides}
    for problem in problems:
        named = problem.removeprefix("trainer.engine=verl: ")
        assert any(named.startswith(key) for key in launcher_keys), problem


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda path: path.stem)
def test_print_config_takes_the_launcher_on_verl(launcher: Path, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``uv run trainer --print-config <the launcher's overrides> trainer.engine=verl``: no
    refusal, except the deprecated launcher's hand-written deploy file (refused by name)."""
    from omni_trainer.cli import main

    overrides = launcher_overrides(launcher, workdir)
    code = main(["--print-config", *overrides, "trainer.engine=verl", f"trainer.default_local_dir={workdir / 'run'}"])
    printed = capsys.readouterr()
    refused = [key for key in REFUSED_ON_BOTH if any(split(o)[0] == key for o in overrides)]
    if refused:
        assert code == 2 and all(key in printed.err for key in refused), printed.err
    else:
        assert code == 0, printed.err
        assert "engine: verl" in printed.out


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda path: path.stem)
def test_the_local_engine_honours_each_key_or_refuses_it_by_name(launcher: Path, workdir: Path) -> None:
    overrides = launcher_overrides(launcher, workdir)
    config = load_config(overrides + [f"trainer.default_local_dir={workdir / 'run'}"])
    assert config.trainer.engine == "local"
    problems, _ = findings(config)
    for key, _value in map(split, overrides):
        refusals = [p for p in problems if p.startswith(f"{key}=")]
        spec = verl_key(key)
        refused = key in REFUSED_ON_BOTH or (spec is not None and not spec.doc.honours(value_at(config, spec.name), config))
        assert len(refusals) == (1 if refused else 0), (key, refusals)
        if spec is not None and refused:
            (refusal,) = refusals
            assert "is a verl-engine setting" in refusal and "the local engine" in refusal
    launcher_keys = {split(o)[0] for o in overrides}
    assert all(any(p.startswith(f"{key}=") for key in launcher_keys) for p in problems), problems


def test_the_reference_launchers_seven_silent_keys_are_refused_or_honoured(workdir: Path) -> None:
    """The keys the local engine used to drop in silence, on the seeds' reference launcher."""
    (launcher,) = [path for path in LAUNCHERS if path.stem == "run_qwen3_omni_thinker_gspo_lora_v1"]
    overrides = launcher_overrides(launcher, workdir)
    problems, _ = findings(load_config(overrides + [f"trainer.default_local_dir={workdir / 'run'}"]))
    refused = {p.split("=", 1)[0] for p in problems}
    assert {"actor_rollout_ref.actor.strategy", "trainer.n_gpus_per_node",
            "actor_rollout_ref.rollout.tensor_model_parallel_size", "actor_rollout_ref.rollout.gpu_memory_utilization",
            "actor_rollout_ref.model.use_remove_padding"} <= refused
    # One node, and autoregressive text: what the local engine does.
    assert {"trainer.nnodes", "actor_rollout_ref.rollout.engine_kwargs.vllm_omni.output_mode"}.isdisjoint(refused)
    problems, _ = findings(load_config(overrides + ["trainer.nnodes=2", f"trainer.default_local_dir={workdir / 'run'}"]))
    assert any(p.startswith("trainer.nnodes=2 is a verl-engine setting") for p in problems)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda path: path.stem)
def test_verl_accepts_the_translated_launcher(launcher: Path, workdir: Path) -> None:
    """verl's own checks and config classes take the launcher's values (what its trainer and
    workers build; the keys omni-rl refuses left out)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    overrides = [o for o in launcher_overrides(launcher, workdir) if split(o)[0] not in OWN_WAY_ON_VERL]
    verl = to_verl_config(load_config(overrides + ["trainer.engine=verl"]), lora_target_modules=None,
                          lora_exclude_modules=None)
    validate_config(config=verl, use_reference_policy=need_reference_policy(verl), use_critic=need_critic(verl))
    for section in (verl.actor_rollout_ref.actor, verl.actor_rollout_ref.rollout, verl.actor_rollout_ref.model):
        omega_conf_to_dataclass(section)


LAUNCHER_GOLDEN = Path(__file__).parent / "golden" / "launchers"


def shown_workdir(node: Any, workdir: str) -> Any:
    """``node`` with the test directory shown as ``<workdir>`` in every string, replaced before the
    YAML is written: where YAML wraps a long string depends on its length, so the golden does not
    depend on where pytest puts its temporary files (pytest-xdist's workers add a folder)."""
    if isinstance(node, dict):
        return {key: shown_workdir(value, workdir) for key, value in node.items()}
    if isinstance(node, list):
        return [shown_workdir(value, workdir) for value in node]
    return node.replace(workdir, "<workdir>") if isinstance(node, str) else node


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda path: path.stem)
def test_each_launcher_translates_to_its_golden_verl_config(launcher: Path, workdir: Path) -> None:
    """The whole verl config each launcher's overrides translate to, byte for byte (the test
    directory shown as ``<workdir>``; a launcher that names no experiment gets one, since the
    derived name hashes the test directory's files): the safety net for reworking the
    translation (issue 48). Regenerate deliberately:
    ``OMNI_RL_UPDATE_GOLDEN=1 uv run pytest <this file> -k golden``."""
    overrides = launcher_overrides(launcher, workdir)
    named = any(split(o)[0] == "trainer.experiment_name" for o in overrides)
    config = load_config(overrides + ["trainer.engine=verl", f"trainer.default_local_dir={workdir / 'run'}",
                                      *([] if named else ["trainer.experiment_name=launcher"])])
    verl = to_verl_config(config, lora_target_modules=None, lora_exclude_modules=None)
    shown = shown_workdir(OmegaConf.to_container(verl, resolve=True), str(workdir))
    resolved = OmegaConf.to_yaml(OmegaConf.create(shown))
    golden = LAUNCHER_GOLDEN / f"{launcher.stem}.yaml"
    if os.environ.get("OMNI_RL_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(resolved)
    assert resolved == golden.read_text()


def refusals(overrides: list[str]) -> tuple[dict[str, str], Config | None]:
    """``{launcher key: the message refusing it}`` as the CLI finds them stage by stage (the
    config's keys, then the pre-flight), and the config of the keys taken (``None`` when a
    refused key left out makes another of the launcher's values impossible with our default)."""
    refused: dict[str, str] = {}
    keys = [split(o)[0] for o in overrides]
    for _ in range(8):
        kept = [o for o in overrides if split(o)[0] not in refused]
        try:
            config = load_config([*kept, "trainer.engine=verl"])
        except ConfigError as exc:
            problems = exc.problems
        else:
            problems, _ = findings(config)
            if not problems:
                return refused, config
        before = len(refused)
        for problem in problems:
            named = problem.removeprefix("trainer.engine=verl: ")
            lead = re.match(r"[\w.]+", named)
            matching = [key for key in keys if named.startswith(key)
                        or (lead is not None and key.startswith(lead.group() + "."))]
            assert matching, f"a refusal that names no launcher key: {problem}"
            refused.setdefault(max(matching, key=len), problem)
        if len(refused) == before:
            return refused, None
    raise AssertionError(f"still refused after dropping {sorted(refused)}: {problems}")


@pytest.mark.parametrize("launcher", REFUSED_LAUNCHERS, ids=lambda path: path.stem)
def test_a_launcher_of_what_omni_rl_lacks_is_refused_key_by_key_with_why(launcher: Path, workdir: Path) -> None:
    """Each key it cannot take is refused by its own name with the reason (never a bare
    ``unknown key``); once those are dropped, the rest load and pass the pre-flight."""
    refused, config = refusals(launcher_overrides(launcher, workdir))
    assert refused, "this launcher is taken whole: move it up to verl_omni_launchers/"
    bare = {key: message for key, message in refused.items() if "unknown key" in message}
    assert bare == {}
    assert config is None or config.trainer.engine == "verl"


def test_the_avqa_video_launcher_hears_each_clip_as_an_audio_item(workdir: Path) -> None:
    """Its dataset class (verl-omni's NextQARLHFDataset) is taken as data.soundtrack_as_audio;
    what stays refused is Megatron and verl's V1 trainer modes."""
    (launcher,) = [path for path in REFUSED_LAUNCHERS if path.stem.endswith("_avqa_video_separate_async")]
    refused, config = refusals(launcher_overrides(launcher, workdir))
    assert config is not None and config.data.soundtrack_as_audio and not config.data.use_audio_in_video
    assert not any(key.startswith("data.") for key in refused), refused
