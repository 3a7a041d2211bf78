"""A registry of adapter classes that refuses bad entries and explains its misses."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from omni_contracts.errors import AdapterNotFoundError, RegistrationError
from omni_contracts.plugins import MODEL_MODULES_ENV, ModelPackageLoader

K = TypeVar("K", bound=Hashable)
A = TypeVar("A")


def qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class AdapterRegistry(Generic[K, A]):
    """Maps a key to an adapter class.

    Registration happens at class-definition time (through the adapter base's decorator).
    A lookup miss imports the installed model packages once and looks again.

    Args:
        kind: what is registered, for messages ("training adapter").
        base: the class every entry must subclass.
        describe_key: renders a key for messages.
        loader: finds the installed model packages.
    """

    def __init__(
        self,
        kind: str,
        base: type,
        *,
        describe_key: Callable[[K], str],
        loader: ModelPackageLoader,
    ) -> None:
        self.kind = kind
        self.base = base
        self.describe_key = describe_key
        self.loader = loader
        self._entries: dict[K, type[A]] = {}
        self._lock = threading.Lock()

    def add(self, key: K, cls: type[A]) -> None:
        """Register ``cls`` under ``key``.

        Raises:
            RegistrationError: ``cls`` is not a concrete subclass of the base, or another
                class already holds ``key``.
        """
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise RegistrationError(
                f"Cannot register {cls!r} as a {self.kind} for {self.describe_key(key)}: "
                f"it must be a subclass of {qualified_name(self.base)}."
            )
        if inspect.isabstract(cls):
            missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
            raise RegistrationError(
                f"Cannot register {qualified_name(cls)} as a {self.kind} for "
                f"{self.describe_key(key)}: it is abstract. Implement: {missing}."
            )
        with self._lock:
            holder = self._entries.get(key)
            if holder is not None and holder is not cls:
                raise RegistrationError(
                    f"Duplicate {self.kind} for {self.describe_key(key)}: "
                    f"{qualified_name(cls)} cannot replace {qualified_name(holder)}, "
                    "which is already registered. Register one of them under another key, "
                    "or uninstall the package that provides the other."
                )
            self._entries[key] = cls

    def get(self, key: K) -> type[A]:
        """The class registered under ``key``, importing installed model packages if needed.

        Raises:
            AdapterNotFoundError: nothing holds ``key`` after the model packages loaded.
            ModelPackageImportError: an installed model package failed to import.
        """
        found = self._entries.get(key)
        if found is not None:
            return found
        self.loader.load_all()
        found = self._entries.get(key)
        if found is not None:
            return found
        raise AdapterNotFoundError(self._miss_message(key))

    def keys(self) -> list[K]:
        """Registered keys, without loading model packages."""
        return list(self._entries)

    def _miss_message(self, key: K) -> str:
        registered = sorted(self.describe_key(k) for k in self._entries)
        installed = [package.describe() for package in self.loader.installed()]
        return (
            f"No {self.kind} is registered for {self.describe_key(key)}.\n"
            f"Registered: {', '.join(registered) if registered else 'none'}.\n"
            f"Installed model packages (entry-point group '{self.loader.group}'): "
            f"{', '.join(installed) if installed else 'none'}.\n"
            "Install the model package that provides it, or check the spelling of the key. "
            f"(From a checkout that is not installed, name its modules in ${MODEL_MODULES_ENV}, e.g. "
            "omni_qwen3.adapters.)"
        )
