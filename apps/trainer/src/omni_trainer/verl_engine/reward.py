"""verl's custom reward function (``reward.custom_reward_function``), backed by omni-rewards.

verl calls :func:`compute_score` once per sample from its reward workers (threads of a
Ray actor). Each call goes through one omni-rewards :class:`RewardManager` per process,
so every sample gets the manager's per-sample timeout and crash isolation. A sample whose
scorer fails, times out or (with ``on_unknown_data_source=skip``) has no scorer scores 0
and says so: the returned dict always carries ``reward_ok``, ``reward_timeout``,
``reward_error`` and ``reward_skipped`` (0/1), which verl averages into its step metrics,
and the manager logs the first failure messages. The key set is fixed so every sample of
a batch reports the same extra fields.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Mapping
from typing import Any

from omni_rewards import RewardManager, RewardManagerConfig
from omni_trainer import builtin_task

STATUS_KEYS = ("ok", "timeout", "error", "skipped")
builtin_task.register_scorer()  # the embedded default's rows (omni_trainer.builtin_files)
_managers: dict[tuple[Any, ...], RewardManager] = {}
_lock = threading.Lock()


def _manager(num_workers: int | None, timeout_s: float, on_unknown_data_source: str) -> RewardManager:
    key = (num_workers, timeout_s, on_unknown_data_source)
    with _lock:
        if key not in _managers:
            manager = RewardManager(RewardManagerConfig(
                num_workers=num_workers, timeout_s=timeout_s,
                on_unknown_data_source=on_unknown_data_source,  # type: ignore[arg-type]
            ))
            manager.start()
            atexit.register(manager.close)
            _managers[key] = manager
        return _managers[key]


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    *,
    num_workers: int | None = None,
    timeout_s: float = 30.0,
    on_unknown_data_source: str = "raise",
    **_: Any,
) -> dict[str, float]:
    """One sample's reward: ``score``, ``acc`` and the ``reward_<status>`` indicators.

    Raises:
        UnknownDataSourceError: no scorer for ``data_source`` and the policy is ``raise``.
    """
    manager = _manager(num_workers, timeout_s, on_unknown_data_source)
    outcome = manager.score_batch([data_source], [solution_str], [str(ground_truth)], [dict(extra_info or {})]).outcomes[0]
    result = {"score": float(outcome.score), "acc": float(outcome.result.get("acc", outcome.score))}
    result.update({f"reward_{status}": float(outcome.status == status) for status in STATUS_KEYS})
    return result
