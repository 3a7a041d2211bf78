"""The embedded default, whole process, under both engines: the local engine vs verl on the CPU.

    uv run python benchmarks/engines.py [--steps 20]

Runs ``python -m omni_trainer.cli`` (what ``uv run trainer`` runs, without uv's own start-up)
twice, one process after the other, on the embedded default (the tiny Qwen3-Omni, built
offline, and the built-in image+audio task):

- local: ``trainer.engine=local``, the in-process engine;
- verl: ``trainer.engine=verl trainer.device=cpu``, verl's trainer loop on a local Ray, its
  FSDP2 actor on one gloo rank and the ``omni_local`` rollout replica (docs/engines/verl-cpu.md).

Both get the same overrides apart from the engine and the run directory
(``shared_overrides``): N steps, no validation before training, ``test_freq=-1``,
``save_freq=-1``, a fresh run (``resume_mode=disable``), ``trainer.device=cpu``, and full
fine-tuning at lr 0.03, which ``embedded_verl.yaml`` applies under verl (its FSDP2 cannot
shard a LoRA-wrapped ``lm_head``) and is passed to the local side explicitly. Before timing,
both resolved configs (``--print-config``) are compared key by key: they may differ only in
``DIFFERENCES`` (each with its reason), and the key settings are printed side by side. Both
processes see the same environment: ``OMP_NUM_THREADS=MKL_NUM_THREADS=--threads`` (default
1, the benchmarks' rule on this shared 2-core CPU; Ray's processes inherit it, where Ray
would otherwise set each worker's from its logical CPUs) and a ``RAY_TMPDIR`` of the
benchmark's own, which marks this run's Ray processes.

Measured per side, identically:

- wall time: from ``Popen`` to the process's exit (start-up, model build or load, data,
  every step, the end of the run and, for verl, Ray's start and ``ray.shutdown``);
- training-steps time: the sum of ``timing_s/step`` over the rows of the run's
  ``metrics.jsonl`` (the local engine's: rollout + reward + log-probs/advantages + update;
  verl's: its ``step`` timer, which also holds the weight sync to the rollout); steps/s =
  steps / that sum. The mean step time after the first is printed beside it (the first
  holds one-time work), and every step's ``timing_s/*`` breakdown is saved;
- peak RSS of the process tree, sampled every ``--sample-s`` (0.2 s): the sum of RSS over the
  driver, every descendant of it, every process whose command line holds this run's
  ``RAY_TMPDIR`` (Ray's gcs_server, raylet, dashboard and monitors) and their descendants
  (Ray's ``ray::...`` workers are children of the raylet). The local side's tree is the
  driver and its reward worker processes. RSS counts shared pages (libraries, Ray's
  object-store mapping) once per process that maps them, so a sum over many processes is an
  upper bound on the memory in use; the processes at the peak are saved with their RSS;
- the reward curve: mean ``critic/score/mean`` of the first 5 and the last 5 steps.

Both sides must run the same number of steps (asserted). Not equal, and left so: the local
engine always saves a checkpoint at its last step and validates at the end (16 prompts x 4
samples) whatever ``save_freq`` and ``test_freq`` say, and verl with ``-1`` does neither:
extra work on the local side's wall time, outside its steps. The two engines shuffle the
same 256 rows with different samplers, so they train on different batches.

Prints a table, then the ratios verl / local (wall time, steps/s, peak RSS) last. The raw
numbers go to ``outputs/benchmarks/engines.json``, each run's console output to
``outputs/benchmarks/engines-<side>.log``. No Ray process of the run outlives it: whatever
is still running ten seconds after the driver exits (or after ``--timeout``) is ended by
process id. Not a CI gate.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import yaml

SIDES = ("local", "verl")
ENGINE_OVERRIDES = {"local": ["trainer.engine=local"], "verl": ["trainer.engine=verl"]}
FULL_FINE_TUNE = [  # what embedded_verl.yaml applies under verl, given to both sides
    "actor_rollout_ref.model.lora_rank=0",
    "actor_rollout_ref.model.target_modules=null",
    "actor_rollout_ref.model.exclude_modules=null",
    "actor_rollout_ref.actor.optim.lr=0.03",
]
DIFFERENCES = {
    "trainer.engine": "what is compared",
    "trainer.default_local_dir": "one run directory per side",
    "actor_rollout_ref.model.path": "local: null, built at setup; verl: the same cached build, resolved up front "
                                    "(checked after the runs)",
    "data.train_files": "local: the built-in rows in memory; verl: the same rows written as parquet",
    "data.val_files": "the same, validation rows",
}
KEY_SETTINGS = (
    "data.train_batch_size", "actor_rollout_ref.rollout.n", "data.max_prompt_length", "data.max_response_length",
    "actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.actor.policy_loss.loss_mode", "algorithm.adv_estimator", "actor_rollout_ref.actor.optim.lr",
    "actor_rollout_ref.model.lora_rank", "actor_rollout_ref.model.target_modules", "trainer.total_training_steps",
    "trainer.val_before_train", "trainer.test_freq", "trainer.save_freq", "trainer.device", "trainer.seed",
)
STEP_LINE = re.compile(r"^step\s+\d+/\d+ \|")
MODEL_LINE = re.compile(r"^model: tiny Qwen3-Omni built offline at (\S+?);?(\s|$)")
RAY_NAMES = ("ray::", "raylet", "gcs_server")
RAY_SYSTEM_ACTORS = ("ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent")
GRACE_S = 10.0


def shared_overrides(steps: int) -> list[str]:
    return [
        "trainer.device=cpu", f"trainer.total_training_steps={steps}", "trainer.resume_mode=disable",
        "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.save_freq=-1", *FULL_FINE_TUNE,
    ]


def command(side: str, steps: int, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "omni_trainer.cli", *ENGINE_OVERRIDES[side], *shared_overrides(steps),
            f"trainer.default_local_dir={run_dir}"]


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


def resolved_config(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run([*argv, "--print-config"], env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} --print-config failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return flatten(yaml.safe_load(done.stdout))


def check_configs(local: dict[str, Any], verl: dict[str, Any]) -> None:
    differing = sorted(k for k in local.keys() | verl.keys() if local.get(k, "<absent>") != verl.get(k, "<absent>"))
    unexpected = [f"{k}: local {local.get(k, '<absent>')!r}, verl {verl.get(k, '<absent>')!r}" for k in differing
                  if k not in DIFFERENCES]
    if unexpected:
        raise AssertionError("The resolved configs differ beyond the engine:\n  " + "\n  ".join(unexpected))
    if local["data.builtin_task_size"] != verl["data.builtin_task_size"] or local["data.train_files"] is not None:
        raise AssertionError("The local side does not train on the built-in task of the same size.")
    if not all("builtin-task-" in path for path in verl["data.train_files"]):
        raise AssertionError(f"verl's train files are not the built-in task's: {verl['data.train_files']}")


# --- the process tree ------------------------------------------------------------------------------


@dataclass
class TreeSampler:
    """Sums RSS over the driver's tree and this run's Ray processes, every ``interval`` seconds."""

    root: int
    marker: str  # this run's RAY_TMPDIR, in the command line of Ray's daemons
    interval: float
    peak_bytes: int = 0
    peak_processes: list[dict[str, Any]] = field(default_factory=list)
    samples: int = 0
    seen: dict[int, str] = field(default_factory=dict)  # pid -> command line, every process ever in the tree
    foreign_ray: int = 0  # most Ray-named processes outside the tree in one sample (another user's Ray)
    _cmdlines: dict[int, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def start(self) -> TreeSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _cmdline(self, pid: int) -> str:
        if pid not in self._cmdlines:
            try:
                self._cmdlines[pid] = " ".join(psutil.Process(pid).cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                self._cmdlines[pid] = ""
        return self._cmdlines[pid]

    def tree(self) -> set[int]:
        """The pids summed: the root, this run's Ray daemons, and all their descendants."""
        children: dict[int, list[int]] = {}
        pids = []
        for proc in psutil.process_iter(["ppid"]):
            pids.append(proc.pid)
            children.setdefault(proc.info["ppid"] or 0, []).append(proc.pid)
        roots = [self.root, *(pid for pid in pids if self.marker in self._cmdline(pid))]
        members: set[int] = set()
        while roots:
            pid = roots.pop()
            if pid not in members:
                members.add(pid)
                roots.extend(children.get(pid, ()))
        self.foreign_ray = max(self.foreign_ray, sum(
            1 for pid in pids if pid not in members and any(name in self._cmdline(pid) for name in RAY_NAMES)
        ))
        return members

    def sample(self) -> None:
        processes = []
        for pid in self.tree():
            try:
                proc = psutil.Process(pid)
                processes.append({"pid": pid, "name": " ".join(proc.cmdline())[:120], "rss": proc.memory_info().rss})
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        for entry in processes:
            self.seen.setdefault(entry["pid"], entry["name"])
        total = sum(entry["rss"] for entry in processes)
        self.samples += 1
        if total > self.peak_bytes:
            self.peak_bytes = total
            self.peak_processes = sorted(processes, key=lambda e: -e["rss"])

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)


def still_running(seen: dict[int, str], marker: str, since: float) -> list[psutil.Process]:
    """Processes of the run still alive: pids once in the tree (started after ``since``, so not
    a reused pid of an older process) and any process holding the run's Ray marker."""
    alive = []
    for proc in psutil.process_iter(["cmdline", "create_time"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if (proc.pid in seen and (proc.info["create_time"] or 0) >= since - 1) or marker in cmdline:
            if proc.pid != os.getpid():
                alive.append(proc)
    return alive


def end_leftovers(seen: dict[int, str], marker: str, since: float) -> list[str]:
    """Waits up to GRACE_S for the run's processes to exit, then ends the rest by pid."""
    deadline = time.monotonic() + GRACE_S
    while (alive := still_running(seen, marker, since)) and time.monotonic() < deadline:
        time.sleep(0.5)
    names = [f"{p.pid} {' '.join(p.info['cmdline'] or [])[:80]}" for p in alive]
    for proc in alive:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, remaining = psutil.wait_procs(alive, timeout=5)
    for proc in remaining:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    return names


# --- one run ---------------------------------------------------------------------------------------


@dataclass
class Run:
    side: str
    argv: list[str]
    wall_s: float = 0.0
    returncode: int | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    line_times: list[float] = field(default_factory=list)  # seconds after Popen at each step line
    model_path: str | None = None
    peak_rss_bytes: int = 0
    peak_processes: list[dict[str, Any]] = field(default_factory=list)
    processes_seen: int = 0
    samples: int = 0
    foreign_ray: int = 0
    left_running: list[str] = field(default_factory=list)
    load_before: tuple[float, ...] = ()
    load_after: tuple[float, ...] = ()

    @property
    def step_seconds(self) -> list[float]:
        return [float(row["timing_s/step"]) for row in self.rows]

    @property
    def steps_s(self) -> float:
        return sum(self.step_seconds)

    @property
    def steps_per_s(self) -> float:
        return len(self.rows) / self.steps_s

    @property
    def rewards(self) -> list[float]:
        return [float(row["critic/score/mean"]) for row in self.rows]

    def reward_mean(self, part: slice) -> float:
        values = self.rewards[part]
        return sum(values) / len(values)

    def peak_breakdown(self) -> dict[str, tuple[int, float]]:
        """At the peak, (processes, MB) per kind: the driver; Ray's actors (``ray::<Class>``,
        verl's task runner, FSDP worker, rollout server, agent loop, reward loop, TransferQueue);
        Ray's own processes (gcs_server, raylet, dashboard and its agents, monitors, idle
        workers); the rest (reward worker processes, multiprocessing helpers)."""
        parts: dict[str, list[float]] = {"driver": [], "ray actors": [], "ray system": [], "other": []}
        for entry in self.peak_processes:
            name = entry["name"]
            if "omni_trainer.cli" in name:
                part = "driver"
            elif name.startswith("ray::") and name.split()[0] not in RAY_SYSTEM_ACTORS:
                part = "ray actors"
            elif name.startswith(("ray::", "ray-")) or "/ray/" in name or "['ray'" in name:
                part = "ray system"
            else:
                part = "other"
            parts[part].append(entry["rss"] / 2**20)
        return {part: (len(values), sum(values)) for part, values in parts.items() if values}

    @property
    def warm_s_per_step(self) -> float:
        """Mean step time after the first (which holds one-time work: first calls, warm-up)."""
        rest = self.step_seconds[1:]
        return sum(rest) / len(rest)

    def raw(self) -> dict[str, Any]:
        return {
            "command": self.argv, "returncode": self.returncode, "wall_s": self.wall_s, "steps": len(self.rows),
            "steps_time_s": self.steps_s, "steps_per_s": self.steps_per_s, "step_seconds": self.step_seconds,
            "warm_s_per_step": self.warm_s_per_step,
            "step_timings": [{k: v for k, v in row.items() if k.startswith("timing_s/")} for row in self.rows],
            "rewards": self.rewards, "reward_first5": self.reward_mean(slice(0, 5)),
            "reward_last5": self.reward_mean(slice(-5, None)), "first_step_line_s": self.line_times[0],
            "last_step_line_s": self.line_times[-1], "peak_rss_mb": self.peak_rss_bytes / 2**20,
            "processes_at_peak": [{**p, "rss_mb": p["rss"] / 2**20} for p in self.peak_processes],
            "peak_breakdown_processes_mb": self.peak_breakdown(),
            "processes_seen": self.processes_seen, "rss_samples": self.samples,
            "ray_processes_outside_tree_max": self.foreign_ray, "ended_after_exit": self.left_running,
            "model_path": self.model_path, "load_average_before": self.load_before,
            "load_average_after": self.load_after,
        }


def run_side(side: str, argv: list[str], env: dict[str, str], run_dir: Path, log: Path, *, interval: float,
             timeout: float) -> Run:
    run = Run(side, argv, load_before=os.getloadavg())
    since = time.time()
    start = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    marker = env["RAY_TMPDIR"] + os.sep
    sampler = TreeSampler(process.pid, marker, interval).start()

    def read_output() -> None:
        assert process.stdout is not None
        with log.open("w") as out:
            for line in process.stdout:
                if STEP_LINE.match(line):
                    run.line_times.append(time.perf_counter() - start)
                if (found := MODEL_LINE.match(line)) and run.model_path is None:
                    run.model_path = found.group(1)
                out.write(line)

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    try:
        run.returncode = process.wait(timeout=timeout)
        run.wall_s = time.perf_counter() - start
    finally:
        sampler.stop()
        if process.poll() is None:  # timed out or interrupted: the driver's session first
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        run.left_running = end_leftovers(sampler.seen, marker, since)
        reader.join(timeout=10)
    run.load_after = os.getloadavg()
    run.peak_rss_bytes, run.peak_processes, run.samples = sampler.peak_bytes, sampler.peak_processes, sampler.samples
    run.processes_seen, run.foreign_ray = len(sampler.seen), sampler.foreign_ray
    if run.returncode != 0:
        raise RuntimeError(f"the {side} run exited with {run.returncode}; its output: {log}")
    metrics = run_dir / "metrics.jsonl"
    run.rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    run.rows = [row for row in run.rows if row.get("timing_s/step") is not None]
    return run


# --- main ------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="training steps per side (trainer.total_training_steps)")
    parser.add_argument("--threads", type=int, default=1, help="OMP/MKL threads of both processes; 0: leave unset")
    parser.add_argument("--sample-s", type=float, default=0.2, help="seconds between RSS samples")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run before it is killed")
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks/engines.json"))
    args = parser.parse_args()
    if args.steps < 5:
        parser.error("--steps must be at least 5 (the reward is compared over the first and last 5 steps)")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="rb-"))  # short: Ray's socket paths live under it
    env = {**os.environ, "RAY_TMPDIR": str(tmp / "r")}  # its daemons' command lines hold "<tmp>/r/"
    if args.threads:
        env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    (tmp / "r").mkdir()
    runs: dict[str, Run] = {}
    try:
        argvs = {side: command(side, args.steps, tmp / side) for side in SIDES}
        configs = {side: resolved_config(argvs[side], env) for side in SIDES}
        check_configs(configs["local"], configs["verl"])
        for side in SIDES:
            log = args.out.with_name(f"{args.out.stem}-{side}.log")
            runs[side] = run_side(side, argvs[side], env, tmp / side, log, interval=args.sample_s, timeout=args.timeout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    local, verl = runs["local"], runs["verl"]

    if not len(local.rows) == len(verl.rows) == args.steps:
        raise AssertionError(f"Steps differ: local {len(local.rows)}, verl {len(verl.rows)}, asked {args.steps}.")
    if local.model_path != configs["verl"]["actor_rollout_ref.model.path"]:
        raise AssertionError(
            f"The sides load different models: {local.model_path} vs {configs['verl']['actor_rollout_ref.model.path']}."
        )

    print(f"\nembedded default, {args.steps} steps per side, OMP threads {args.threads or 'unset'}, RSS every "
          f"{args.sample_s} s; shared overrides: {' '.join(shared_overrides(args.steps))}")
    print(f"{'setting':<54}{'local':>14}{'verl':>14}")
    for key in KEY_SETTINGS:
        print(f"{key:<54}{str(configs['local'][key]):>14}{str(configs['verl'][key]):>14}")
    print(f"differences allowed: {', '.join(DIFFERENCES)}")
    header = (f"{'side':<8}{'wall s':>8}{'steps':>6}{'steps s':>9}{'steps/s':>9}{'s/step 2..':>11}{'1st step at':>12}"
              f"{'after last':>11}"
              f"{'peak RSS MB':>12}{'procs':>6}{'reward first5':>14}{'last5':>7}{'load':>11}")
    print(header)
    for run in (local, verl):
        print(f"{run.side:<8}{run.wall_s:>8.1f}{len(run.rows):>6}{run.steps_s:>9.1f}{run.steps_per_s:>9.3f}"
              f"{run.warm_s_per_step:>11.2f}"
              f"{run.line_times[0]:>12.1f}{run.wall_s - run.line_times[-1]:>11.1f}{run.peak_rss_bytes / 2**20:>12.0f}"
              f"{len(run.peak_processes):>6}{run.reward_mean(slice(0, 5)):>14.3f}"
              f"{run.reward_mean(slice(-5, None)):>7.3f}"
              f"{run.load_before[0]:>6.1f}->{run.load_after[0]:.1f}")
    for run in (local, verl):
        parts = ", ".join(f"{part} {mb:.0f} MB ({count})" for part, (count, mb) in run.peak_breakdown().items())
        print(f"{run.side} at its RSS peak: {parts}")
        if run.left_running:
            print(f"{run.side}: ended {len(run.left_running)} process(es) still running {GRACE_S:.0f} s after exit")
        if run.foreign_ray:
            print(f"{run.side}: up to {run.foreign_ray} Ray process(es) of another session were running (not summed)")
    ratios = {"wall": verl.wall_s / local.wall_s, "steps_per_s": verl.steps_per_s / local.steps_per_s,
              "peak_rss": verl.peak_rss_bytes / local.peak_rss_bytes}
    args.out.write_text(json.dumps({
        "benchmark": "engines", "steps": args.steps, "threads": args.threads, "sample_s": args.sample_s,
        "shared_overrides": shared_overrides(args.steps), "allowed_config_differences": DIFFERENCES,
        "key_settings": {key: {"local": configs["local"][key], "verl": configs["verl"][key]} for key in KEY_SETTINGS},
        "local": local.raw(), "verl": verl.raw(), "ratios_verl_over_local": ratios, "cpus": os.cpu_count(),
        "machine": platform.platform(), "versions": {p: version(p) for p in ("torch", "transformers", "verl", "ray")},
    }, indent=1))
    print(f"raw numbers: {args.out}")
    print(f"ratio verl/local: wall time {ratios['wall']:.2f}x, steps/s {ratios['steps_per_s']:.2f}x, "
          f"peak RSS {ratios['peak_rss']:.2f}x")


if __name__ == "__main__":
    main()
