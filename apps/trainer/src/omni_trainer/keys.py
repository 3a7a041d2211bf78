"""Each config key declared once, on its schema field: what it means, which engines read it, its
range or choices, and how it reaches verl. The checks, the refusals and verl's pass-through
values are derived from these declarations (:func:`range_problems`, :func:`choice_problems`,
:func:`engine_refusals`, :func:`passthrough_values`); ``trainer --help-config KEY`` prints one.

A field is declared with :func:`key`::

    n: int = key(1, "samples per prompt (the GRPO group)", at_least=1)

Every key of the schema is declared (a test holds it). Checks that relate several keys stay in
the pre-flight; mappings whose meaning differs from verl's stay in ``engines.verl.translate``.
Adding a key is its declaration plus its consumer.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

Engines = Literal["both", "local", "verl"]
Honours = Callable[[Any, Any], bool]
"""``(value, config) -> bool``: the value of a one-engine key describes what the other engine does."""
Route = Literal["pass", "mapped", "none"]
PASS: Route = "pass"
"""Sent to verl at its own path when set (not ``None``); verl's default stays otherwise."""
MAPPED: Route = "mapped"
"""Sent to verl by a mapping in ``engines.verl.translate`` (the meaning or the path differs)."""
NOT_SENT: Route = "none"
"""verl has no such key."""
METADATA = "omni_rl_key"


@dataclass(frozen=True)
class KeyDoc:
    """A key's declaration. ``other_engine``: what the engine that does not read a one-engine key
    does instead (its refusal says so); ``honoured``: values of such a key that describe what
    the other engine does anyway, which it accepts. Bounds: ``at_least``/``above`` below,
    ``at_most``/``below`` above; ``allowed`` values pass whatever the bounds say (``-1``: off);
    ``note`` ends the message of a value out of range."""

    help: str
    engines: Engines = "both"
    other_engine: str = ""
    honoured: tuple[Any, ...] | Honours = ()
    at_least: float | None = None
    above: float | None = None
    at_most: float | None = None
    below: float | None = None
    allowed: tuple[Any, ...] = ()
    note: str = ""
    choices: tuple[str, ...] = ()
    verl: Route = PASS

    def bounds(self) -> list[tuple[str, float]]:
        """The declared bounds as ``(operator, value)``, the lower one first."""
        return [(op, v) for op, v in ((">=", self.at_least), (">", self.above), ("<=", self.at_most), ("<", self.below))
                if v is not None]

    def range_problem(self, name: str, value: Any) -> str | None:
        """The problem with ``value`` for key ``name``, or ``None`` when it is in range."""
        if value is None or value in self.allowed or isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        bounds = self.bounds()
        if all(value >= v if op == ">=" else value > v if op == ">" else value <= v if op == "<=" else value < v
               for op, v in bounds):
            return None
        if len(bounds) == 2:
            (low_op, low), (high_op, high) = bounds
            bound = (f"in {'[' if low_op == '>=' else '('}{_number(low)}, "
                     f"{_number(high)}{']' if high_op == '<=' else ')'}")
        else:
            ((op, limit),) = bounds
            bound = f"{op} {_number(limit)}"
        allowed = "".join(f"{shown(v)} or " for v in self.allowed)
        return f"{name}={shown(value)} must be {allowed}{bound}{self.note}"

    def honours(self, value: Any, config: Any) -> bool:
        if callable(self.honoured):
            return self.honoured(value, config)
        return any(value == item and isinstance(value, bool) == isinstance(item, bool) for item in self.honoured)


def any_value(value: Any, config: Any) -> bool:
    """Every value describes what the other engine does."""
    return True


def actor_value(attribute: str) -> Honours:
    """Honoured when equal to the actor's own setting: the local engine sizes every forward
    (old and reference log-probs too) as the update's micro-batches."""
    return lambda value, config: bool(value == getattr(config.actor_rollout_ref.actor, attribute))


def key(default: Any, help: str, **declaration: Any) -> Any:
    """A schema field with its declaration (:class:`KeyDoc`); a list or dict default is copied
    per instance."""
    if isinstance(default, dataclasses.Field):
        raise TypeError(f"key({help!r}): the default is a dataclass field; declare each key once")
    metadata = {METADATA: KeyDoc(help, **declaration)}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def section(factory: type, help: str, **declaration: Any) -> Any:
    """A schema section (a config dataclass) declared as a whole: every key below it is one
    engine's (``engines``), with the section's help and route."""
    return dataclasses.field(default_factory=factory, metadata={METADATA: KeyDoc(help, **declaration)})


@dataclass(frozen=True)
class DeclaredKey:
    name: str
    type: Any
    default: Any
    doc: KeyDoc
    section: bool = False
    """The declaration covers every key below ``name``."""

    def covers(self, given: str) -> bool:
        """``given`` is this key, a key of its dict value, or a key of the section."""
        return given == self.name or given.startswith(self.name + ".")


def declared_keys(schema: Any) -> Iterator[DeclaredKey]:
    """Every declared key of ``schema`` (a config dataclass, or an instance: its own classes,
    subclasses included), dotted, in field order."""
    yield from _walk(schema if isinstance(schema, type) else type(schema), schema, "")


def _walk(cls: type, instance: Any, prefix: str) -> Iterator[DeclaredKey]:
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        child = None if instance is None or isinstance(instance, type) else getattr(instance, field.name)
        factory = field.default_factory
        if dataclasses.is_dataclass(child):
            section = type(child)
        elif isinstance(factory, type) and dataclasses.is_dataclass(factory):
            section = factory  # a subclass the schema's default builds
        else:
            section = hints[field.name]
        doc = field.metadata.get(METADATA)
        if dataclasses.is_dataclass(section) and isinstance(section, type):
            if doc is not None:
                yield DeclaredKey(f"{prefix}{field.name}", section, None, doc, section=True)
            yield from _walk(section, child, f"{prefix}{field.name}.")
            continue
        if doc is not None:
            default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
            yield DeclaredKey(f"{prefix}{field.name}", hints[field.name], default, doc)


def value_at(config: Any, name: str) -> Any:
    """The value at dotted ``name`` of the config dataclasses (dict fields included)."""
    value = config
    for part in name.split("."):
        value = value[part] if isinstance(value, dict) else getattr(value, part)
    return value


def range_problems(config: Any) -> list[str]:
    """One problem per declared key whose value is out of its range."""
    problems = []
    for declared in declared_keys(config):
        if declared.section:
            continue
        problem = declared.doc.range_problem(declared.name, value_at(config, declared.name))
        if problem:
            problems.append(problem)
    return problems


def choice_problems(config: Any) -> list[str]:
    """One problem per declared key whose value is not one of its choices (a key whose default is
    ``None``, "unset", may stay unset)."""
    return [
        f"{declared.name}={value!r}; valid: {', '.join(declared.doc.choices)}"
        for declared in declared_keys(config)
        if declared.doc.choices and (value := value_at(config, declared.name)) not in declared.doc.choices
        and not (value is None and declared.default is None)
    ]


def engine_refusals(config: Any, engine: str, given: list[str]) -> list[str]:
    """One problem per given key (in the order given) that only the other engine reads, with a
    value ``engine`` does not honour: it would change nothing on ``engine``."""
    declared = [d for d in declared_keys(config) if d.doc.engines not in ("both", engine)]
    problems = []
    for name in given:
        owner = max((d for d in declared if d.covers(name)), key=lambda d: len(d.name), default=None)
        if owner is None or owner.doc.honours(value_at(config, owner.name), config):
            continue
        doc = owner.doc
        problems.append(
            f"{name}={shown(value_at(config, name))} is a {doc.engines}-engine setting ({doc.help}); the {engine} "
            f"engine {doc.other_engine}. Drop it, or use trainer.engine={doc.engines}"
        )
    return problems


def passthrough_values(config: Any) -> dict[str, Any]:
    """verl's values of the declared keys it takes unchanged at their own paths (set ones only)."""
    values = {}
    for declared in declared_keys(config):
        if declared.section or declared.doc.verl != PASS or declared.doc.engines == "local":
            continue
        value = value_at(config, declared.name)
        if value is not None:
            values[declared.name] = type(value)(value) if isinstance(value, (list, dict)) else value
    return values


def help_text(schema: Any, name: str) -> str | None:
    """What ``trainer --help-config NAME`` prints: the key's type, default, range or choices,
    engines and meaning; ``None`` when no key of that name is declared."""
    for declared in declared_keys(schema):
        if declared.name != name:
            continue
        doc = declared.doc
        lines = [f"{name}: {_type_name(declared.type)} = {shown(declared.default)}", f"  {doc.help}"]
        bounds = [f"{op} {_number(v)}" for op, v in doc.bounds()]
        if bounds:
            lines.append("  range: " + " and ".join(bounds)
                         + (f" (or {', '.join(shown(v) for v in doc.allowed)})" if doc.allowed else ""))
        if doc.choices:
            lines.append(f"  choices: {', '.join(doc.choices)}")
        read = {"both": "both engines", "local": "the local engine", "verl": "the verl engine"}[doc.engines]
        other = {"local": "the verl engine", "verl": "the local engine"}.get(doc.engines, "")
        lines.append(f"  read by: {read}" + (f" ({other} {doc.other_engine})" if doc.other_engine else ""))
        sent = {PASS: f"as {name}", MAPPED: "mapped by engines.verl.translate", NOT_SENT: "not sent"}[doc.verl]
        if doc.engines != "local":
            lines.append(f"  verl: {sent}")
        return "\n".join(lines)
    return None


def _number(value: float | None) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def shown(value: Any) -> str:
    """A value as an override spells it (true, null, 3)."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    return str(value)


def _type_name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")
