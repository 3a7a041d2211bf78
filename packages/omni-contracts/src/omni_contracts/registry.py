"""Registries: a name (or key) to a registered thing, refusing bad entries and explaining misses.

:class:`Registry` is the one implementation: losses, advantage estimators, agent loops and
scorers are registries of callables; :class:`AdapterRegistry` holds adapter classes and
imports the installed model packages on a miss.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

from omni_contracts.errors import AdapterNotFoundError, RegistrationError, UnknownNameError
from omni_contracts.plugins import MODEL_MODULES_ENV, ModelPackageLoader

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
A = TypeVar("A")


class Registry(Generic[K, T]):
    """Maps a key to a registered item; a second item under a taken key is refused, and a
    miss names what is registered.

    Subclasses adjust it through :meth:`_check` (what an entry must be), :meth:`_on_miss`
    (a last chance to find the key) and the messages.

    Args:
        kind: what a key names, for messages ("policy loss_mode").
        describe_key: renders a key for messages.
    """

    duplicate_error: type[Exception] = RegistrationError
    """Raised when a key is taken by another item."""
    miss_error: type[Exception] = UnknownNameError
    """Raised on a lookup miss."""

    def __init__(self, kind: str, *, describe_key: Callable[[K], str] = repr) -> None:
        self.kind = kind
        self.describe_key = describe_key
        self._entries: dict[K, T] = {}
        self._lock = threading.Lock()

    def add(self, key: K, item: T) -> None:
        """Register ``item`` under ``key`` (again under the same key: no change).

        Raises:
            RegistrationError: ``item`` is not acceptable (:meth:`_check`), or another item
                holds ``key`` (:attr:`duplicate_error`).
        """
        self._check(key, item)
        with self._lock:
            holder = self._entries.get(key)
            if holder is not None and holder is not item:
                raise self.duplicate_error(self._duplicate_message(key, item, holder))
            self._entries[key] = item

    def register(self, *keys: K) -> Callable[[T], T]:
        """Decorator form of :meth:`add`, under each of ``keys``."""

        def decorate(item: T) -> T:
            for key in keys:
                self.add(key, item)
            return item

        return decorate

    def get(self, key: K) -> T:
        """The item registered under ``key``.

        Raises:
            UnknownNameError: nothing holds ``key``; the message lists what does
                (:attr:`miss_error`).
        """
        found = self._entries.get(key)
        if found is None:
            found = self._on_miss(key)
        if found is None:
            raise self.miss_error(self._miss_message(key))
        return found

    __getitem__ = get

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[K]:
        """Registered keys, in registration order."""
        return list(self._entries)

    def _check(self, key: K, item: T) -> None:
        """Raise :class:`RegistrationError` when ``item`` may not be registered under ``key``."""
        if isinstance(key, str) and not key:
            raise RegistrationError(f"Cannot register {_name(item)} as a {self.kind}: the key is empty.")

    def _on_miss(self, key: K) -> T | None:
        """The item for a key not registered yet, or ``None`` (a subclass may load plugins)."""
        return None

    def _duplicate_message(self, key: K, item: T, holder: T) -> str:
        return (
            f"Duplicate {self.kind} {self.describe_key(key)}: {_name(item)} cannot replace {_name(holder)}, "
            "which is already registered. Register one of them under another key."
        )

    def _miss_message(self, key: K) -> str:
        registered = sorted(self.describe_key(k) if not isinstance(k, str) else k for k in self._entries)
        return f"Unknown {self.kind} {self.describe_key(key)}; registered: {', '.join(registered) or 'none'}."


def _name(item: object) -> str:
    if isinstance(item, type):
        return qualified_name(item)
    module, qualname = getattr(item, "__module__", None), getattr(item, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else repr(item)


def qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class AdapterRegistry(Registry[K, type[A]]):
    """Maps a key to an adapter class.

    Registration happens at class-definition time (through the adapter base's decorator).
    A lookup miss imports the installed model packages once and looks again.

    Args:
        kind: what is registered, for messages ("training adapter").
        base: the class every entry must subclass.
        describe_key: renders a key for messages.
        loader: finds the installed model packages.
    """

    miss_error = AdapterNotFoundError

    def __init__(
        self,
        kind: str,
        base: type,
        *,
        describe_key: Callable[[K], str],
        loader: ModelPackageLoader,
    ) -> None:
        super().__init__(kind, describe_key=describe_key)
        self.base = base
        self.loader = loader

    def _check(self, key: K, cls: type[A]) -> None:
        """A concrete subclass of the base.

        Raises:
            RegistrationError: ``cls`` is not a subclass of the base, or is abstract.
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

    def _on_miss(self, key: K) -> type[A] | None:
        """Import the installed model packages (their adapters register), then look again.

        Raises:
            ModelPackageImportError: an installed model package failed to import.
        """
        self.loader.load_all()
        return self._entries.get(key)

    def _duplicate_message(self, key: K, cls: type[A], holder: type[A]) -> str:
        return (
            f"Duplicate {self.kind} for {self.describe_key(key)}: "
            f"{qualified_name(cls)} cannot replace {qualified_name(holder)}, "
            "which is already registered. Register one of them under another key, "
            "or uninstall the package that provides the other."
        )

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
