from __future__ import annotations

import abc
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from omni_contracts import (
    AdapterNotFoundError,
    AdapterRegistry,
    ModelPackageImportError,
    ModelPackageLoader,
    RegistrationError,
    Registry,
    TrainingAdapter,
    UnknownNameError,
    get_training_adapter,
)


class Base(abc.ABC):
    @abc.abstractmethod
    def run(self) -> None: ...


class First(Base):
    def run(self) -> None:
        pass


class Second(Base):
    def run(self) -> None:
        pass


def make_registry(group: str = "omni_rl.tests.empty") -> AdapterRegistry[str, Base]:
    return AdapterRegistry(
        "test adapter", Base, describe_key=lambda k: f"key {k!r}", loader=ModelPackageLoader(group)
    )


def install_plugin(root: Path, dist: str, entry_name: str, module: str, source: str, group: str) -> None:
    """Install a module plus a dist-info folder that declares it as an entry point."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{entry_name} = {module}\n")


def test_duplicate_registration_names_both_classes() -> None:
    registry = make_registry()
    registry.add("a", First)
    registry.add("a", First)  # the same class again is harmless (a re-imported module)
    with pytest.raises(RegistrationError) as info:
        registry.add("a", Second)
    message = str(info.value)
    assert "key 'a'" in message
    assert f"{__name__}.Second" in message and f"{__name__}.First" in message


def test_abstract_class_is_refused_with_missing_methods() -> None:
    with pytest.raises(RegistrationError, match=r"abstract\. Implement: run\."):
        make_registry().add("a", Base)


def test_non_subclass_is_refused() -> None:
    with pytest.raises(RegistrationError, match="must be a subclass of .*Base"):
        make_registry().add("a", int)  # type: ignore[arg-type]


def test_unknown_training_stage_is_refused_at_registration() -> None:
    with pytest.raises(RegistrationError, match="'decoder'.*valid stages: thinker, talker, all"):
        TrainingAdapter.register("X", stage="decoder")  # type: ignore[arg-type]


def test_training_adapter_lookup_with_unknown_stage_lists_stages() -> None:
    with pytest.raises(AdapterNotFoundError, match="valid stages: thinker, talker, all"):
        get_training_adapter("X", "vocoder")


def test_abstract_training_adapter_cannot_be_registered() -> None:
    class Half(TrainingAdapter):
        def get_strip_modules(self, model_config: Any) -> Sequence[str]:
            return []

    with pytest.raises(RegistrationError, match="configure_processor, configure_tokenizer"):
        TrainingAdapter.register("HalfArch", stage="all")(Half)


def test_miss_names_key_registered_keys_and_installed_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = "omni_rl.tests.miss"
    install_plugin(tmp_path, "other-models", "other", "miss_plugin_mod", "X = 1\n", group)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = make_registry(group)
    registry.add("first", First)
    with pytest.raises(AdapterNotFoundError) as info:
        registry.get("absent")
    message = str(info.value)
    assert "No test adapter is registered for key 'absent'" in message
    assert "Registered: key 'first'." in message
    assert "other = miss_plugin_mod (from other-models)" in message
    assert f"'{group}'" in message


def test_miss_with_nothing_installed_says_none() -> None:
    with pytest.raises(AdapterNotFoundError, match=r"(?s)Registered: none\..*packages.*: none\."):
        make_registry("omni_rl.tests.nothing").get("absent")


def test_lookup_miss_loads_entry_points_lazily_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = "omni_rl.tests.lazy"
    registry = make_registry(group)
    source = f"""
    import pathlib
    pathlib.Path({str(tmp_path / "imports.log")!r}).open("a").write("imported\\n")
    from lazy_registry_holder import REGISTRY, First
    REGISTRY.add("lazy", First)
    """
    install_plugin(tmp_path, "lazy-models", "lazy", "lazy_plugin_mod", source, group)
    # The plugin registers into this test's registry through a holder module.
    (tmp_path / "lazy_registry_holder.py").write_text("REGISTRY = None\nFirst = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import lazy_registry_holder

    lazy_registry_holder.REGISTRY = registry
    lazy_registry_holder.First = First
    assert not (tmp_path / "imports.log").exists()  # nothing imported before the lookup
    assert registry.get("lazy") is First
    with pytest.raises(AdapterNotFoundError):
        registry.get("still-absent")  # a second miss does not import the plugin again
    assert (tmp_path / "imports.log").read_text() == "imported\n"


def test_broken_model_package_is_reported_with_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = "omni_rl.tests.broken"
    source = f"""
    import pathlib
    pathlib.Path({str(tmp_path / "attempts.log")!r}).open("a").write("attempt\\n")
    raise RuntimeError("tokenizer files are missing")
    """
    install_plugin(tmp_path, "broken-models", "broken", "broken_plugin_mod", source, group)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = make_registry(group)
    with pytest.raises(ModelPackageImportError) as first:
        registry.get("anything")
    message = str(first.value)
    assert f"1 installed model package(s) of entry-point group '{group}' failed" in message
    assert "broken = broken_plugin_mod: RuntimeError: tokenizer files are missing" in message
    assert "Fix or uninstall" in message
    assert isinstance(first.value.__cause__, RuntimeError)
    with pytest.raises(ModelPackageImportError) as second:
        registry.get("anything")
    assert second.value is first.value
    assert (tmp_path / "attempts.log").read_text() == "attempt\n"  # loaded once


def test_the_generic_registry_refuses_a_second_item_and_lists_what_it_has_on_a_miss() -> None:
    """The one registry the losses, estimators, agent loops and scorers are built on."""
    losses: Registry[str, object] = Registry("policy loss_mode")

    @losses.register("gspo", "gspo_token")
    def gspo() -> None: ...

    def other() -> None: ...

    losses.add("gspo", gspo)  # the same item again: no change
    assert losses.get("gspo_token") is gspo and losses["gspo"] is gspo
    assert "gspo" in losses and "ppo" not in losses and list(losses) == ["gspo", "gspo_token"] and len(losses) == 2
    with pytest.raises(RegistrationError, match=r"Duplicate policy loss_mode 'gspo': .*other cannot replace .*gspo"):
        losses.add("gspo", other)
    with pytest.raises(RegistrationError, match="the key is empty"):
        losses.add("", other)
    with pytest.raises(UnknownNameError, match=r"Unknown policy loss_mode 'ppo'; registered: gspo, gspo_token\.") as miss:
        losses.get("ppo")
    assert isinstance(miss.value, ValueError) and isinstance(miss.value, LookupError)
    assert losses.get("gspo") is gspo  # a refused entry changed nothing
