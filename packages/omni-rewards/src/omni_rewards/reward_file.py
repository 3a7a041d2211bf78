"""``reward.custom_reward_function.path/name``: a user's scorer file, loaded as verl loads it.

verl imports the Python file at ``path`` (or the module ``pkg://<import name>``) and calls ``name`` (default ``compute_score``) as
``name(data_source=..., solution_str=..., ground_truth=..., extra_info=..., **reward_kwargs)`` for every
response, by keyword; it returns a number or a mapping with a ``"score"``, and may be ``async``
(verl awaits it). With a judge model (``reward.reward_model.enable``) it also gets
``reward_router_address`` (the judge's ``host:port``) and ``reward_model_tokenizer`` (the judge's
tokenizer, loaded once per process). Here the call runs in the reward manager's worker processes
(timed, crash-safe): each worker imports the file once. A scorer registry built by
:func:`custom_registry` routes every data source of the run to it.

Light: no torch; reward workers import this module.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from omni_rewards import ScorerRegistry


class CustomRewardError(ValueError):
    """The custom reward file cannot be loaded or has no such function."""


PKG_PREFIX = "pkg://"
"""verl's spelling of a module by import name (``pkg://verl_omni.utils.reward_score.audio_mcq``)."""


@functools.cache
def load_reward_function(path: str, name: str) -> Callable[..., Any]:
    """``name`` from the Python file at ``path``, or from the module ``pkg://<import name>``
    (as verl resolves it); the module is imported once per process.

    Raises:
        CustomRewardError: the file is missing, the module fails to import, or has no callable ``name``.
    """
    if path.startswith(PKG_PREFIX):
        try:
            module = importlib.import_module(path.removeprefix(PKG_PREFIX))
        except Exception as exc:
            raise CustomRewardError(f"path={path}: importing {path.removeprefix(PKG_PREFIX)} failed: "
                                    f"{type(exc).__name__}: {exc} (is its package installed where the run starts?)"
                                    ) from exc
        return _callable(module, name, path)
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise CustomRewardError(f"path={path} does not exist (a Python file defining {name}())")
    module_name = "omni_rl_custom_reward_" + hashlib.sha1(str(file).encode()).hexdigest()[:10]
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise CustomRewardError(f"path={path} is not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise CustomRewardError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    return _callable(module, name, path)


def _callable(module: Any, name: str, path: str) -> Callable[..., Any]:
    function = getattr(module, name, None)
    if not callable(function):
        found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise CustomRewardError(
            f"{path} has no function {name!r} (reward.custom_reward_function.name); it defines: "
            f"{', '.join(found) or 'nothing callable'}"
        )
    return function


JUDGE_PRELOAD = ("transformers.models.auto.tokenization_auto",)
"""What a worker imports at start-up to load :func:`judge_tokenizer` quickly (``RewardManagerConfig.preload``)."""


@functools.cache
def judge_tokenizer(model_path: str) -> Any:
    """The judge's tokenizer (verl's ``reward_model_tokenizer``), loaded once per process."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)


def judge_kwargs(reward_router_address: str, judge_model_path: str | None) -> dict[str, Any]:
    """The keyword arguments a reward file's function gets for a judge model, as they travel to
    the reward workers (the tokenizer by its path: :func:`score_with_file` loads it there)."""
    return {"reward_router_address": reward_router_address, "judge_model_path": judge_model_path}


def score_with_file(
    path: str, name: str, data_source: str, solution_str: str, ground_truth: str,
    extra_info: Mapping[str, Any] | None = None, *, judge_model_path: str | None = None, **kwargs: Any,
) -> Any:
    """One response through the user's function, called and awaited as verl calls it (what a
    reward worker runs); ``judge_model_path`` becomes ``reward_model_tokenizer``."""
    if judge_model_path is not None:
        kwargs["reward_model_tokenizer"] = judge_tokenizer(judge_model_path)
    result = load_reward_function(path, name)(data_source=data_source, solution_str=solution_str,
                                              ground_truth=ground_truth, extra_info=extra_info, **kwargs)
    return asyncio.run(_awaited(result)) if inspect.isawaitable(result) else result


async def _awaited(result: Any) -> Any:
    return await result


def custom_scorer(path: str, name: str, data_source: str, reward_kwargs: Mapping[str, Any] | None = None) -> Any:
    """The scorer a reward manager runs for ``data_source``: the user's function with
    ``reward_kwargs`` (picklable: the workers import the file themselves)."""
    return functools.partial(score_with_file, path, name, data_source, **dict(reward_kwargs or {}))


def custom_registry(
    path: str, name: str, data_sources: Iterable[str], reward_kwargs: Mapping[str, Any] | None = None
) -> ScorerRegistry:
    """A scorer registry sending each of ``data_sources`` to ``name`` in ``path``, with
    ``reward_kwargs`` (verl's ``custom_reward_function.reward_kwargs``) on every call.

    Raises:
        CustomRewardError: the function cannot be loaded (checked here, before any worker).
    """
    load_reward_function(path, name)
    registry = ScorerRegistry()
    for source in sorted(set(data_sources)):
        registry.add(source, custom_scorer(path, name, source, reward_kwargs))
    return registry
