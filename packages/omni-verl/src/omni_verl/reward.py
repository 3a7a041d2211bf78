"""verl's custom reward function (``reward.custom_reward_function``), backed by omni-rewards.

verl calls :func:`compute_score` once per sample from its reward workers (threads of a
Ray actor). Each call goes through one omni-rewards :class:`RewardManager` per process,
so every sample gets the manager's per-sample timeout and crash isolation. A sample whose
scorer fails, times out or (with ``on_unknown_data_source=skip``) has no scorer scores 0
and says so: the returned dict always carries ``reward_ok``, ``reward_timeout``,
``reward_error`` and ``reward_skipped`` (0/1), which our agent-loop workers tally per step
(``reward/errors``, ``reward/timeouts`` and the means of the other fields in the step's
metrics: :class:`omni_training.run_guards.StepTally`), and the manager logs the first failure
messages. The key set is fixed so every sample of
a batch reports the same extra fields.

A user's ``reward.custom_reward_function`` (verl's key) travels in the reward kwargs
(``custom_path``, ``custom_name``, ``custom_kwargs``): every data source is then scored by
that function (:mod:`omni_rewards.reward_file`), called as verl calls it, with the same
timeout and failure accounting. With verl's reward model (``reward.reward_model.enable``) verl
hands this function the judge's ``reward_router_address`` and ``reward_model_tokenizer``; both
reach the user's function (the tokenizer by its path: each scorer process loads it once).
"""

from __future__ import annotations

import atexit
import json
import threading
from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf

from omni_rewards import SCORERS, RewardManager, RewardManagerConfig, ScorerRegistry
from omni_rewards.api import as_ground_truth
from omni_rewards.reward_file import JUDGE_PRELOAD, custom_scorer, judge_kwargs, load_reward_function
from omni_training.run_guards import REWARD_FIELDS, REWARD_REASON

STATUS_KEYS = ("ok", "timeout", "error", "skipped")
_managers: dict[tuple[Any, ...], RewardManager] = {}
_lock = threading.Lock()


def _manager(
    num_workers: int | None, timeout_s: float, on_unknown_data_source: str, custom: tuple[str, str, str] | None,
    judged: bool = False,
) -> RewardManager:
    """This process's manager for these settings; ``custom`` is ``(path, name, kwargs as JSON)``
    of a user's reward function (its registry starts empty: :func:`_route`); ``judged``: its
    workers load the judge's tokenizer."""
    key = (num_workers, timeout_s, on_unknown_data_source, custom, judged)
    with _lock:
        if key not in _managers:
            manager = RewardManager(RewardManagerConfig(
                num_workers=num_workers, timeout_s=timeout_s,
                on_unknown_data_source=on_unknown_data_source,  # type: ignore[arg-type]
                preload=JUDGE_PRELOAD if judged else (),
            ), registry=SCORERS if custom is None else ScorerRegistry())
            manager.start()
            atexit.register(manager.close)
            _managers[key] = manager
        return _managers[key]


def _route(manager: RewardManager, data_source: str, custom: tuple[str, str, str]) -> None:
    """Send ``data_source`` to the user's function (verl's custom reward function scores
    every data source; the sources are learnt as samples arrive)."""
    path, name, kwargs = custom
    with _lock:
        if data_source not in manager.registry:
            manager.registry.add(data_source, custom_scorer(path, name, data_source, json.loads(kwargs)))


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    *,
    num_workers: int | None = None,
    timeout_s: float = 30.0,
    on_unknown_data_source: str = "raise",
    custom_path: str | None = None,
    custom_name: str = "compute_score",
    custom_kwargs: Mapping[str, Any] | None = None,
    reward_router_address: str | None = None,
    reward_model_tokenizer: Any = None,
    **_: Any,
) -> dict[str, Any]:
    """One sample's reward: ``score``, ``acc``, the ``reward_<status>`` indicators, why it failed
    (``reward_reason``, empty if it did not) and the scorer's other fields (``reward_fields``, JSON).

    Raises:
        UnknownDataSourceError: no scorer for ``data_source`` and the policy is ``raise``.
        omni_rewards.reward_file.CustomRewardError: ``custom_path`` cannot be loaded.
    """
    custom = None
    if custom_path:
        load_reward_function(custom_path, custom_name)  # a clear error here, not one per sample in the workers
        kwargs: dict[str, Any] = dict(OmegaConf.to_container(custom_kwargs) if OmegaConf.is_config(custom_kwargs)  # type: ignore[arg-type]
                                      else custom_kwargs or {})
        if reward_router_address is not None:
            kwargs.update(judge_kwargs(reward_router_address, getattr(reward_model_tokenizer, "name_or_path", None)))
        custom = (custom_path, custom_name, json.dumps(kwargs, sort_keys=True))
    manager = _manager(num_workers, timeout_s, on_unknown_data_source, custom, reward_router_address is not None)
    if custom is not None:
        _route(manager, data_source, custom)
    outcome = manager.score_batch([data_source], [solution_str], [as_ground_truth(ground_truth)], [dict(extra_info or {})]).outcomes[0]
    result: dict[str, Any] = {"score": float(outcome.score), "acc": float(outcome.result.get("acc", outcome.score))}
    result.update({f"reward_{status}": float(outcome.status == status) for status in STATUS_KEYS})
    result[REWARD_REASON] = outcome.error or ""
    # The scorer's other fields, in one string: verl stacks each key across a batch, and a failed
    # sample has none of them (verl's validation metrics skip strings; our tallies read it).
    fields = {name: float(value) for name, value in outcome.result.items() if name not in result}
    result[REWARD_FIELDS] = json.dumps(fields, sort_keys=True)
    return result
