"""The docs site's generated parts, built from the code at build time (``site_hook.py`` calls them).

Each generator returns Markdown and reads what it documents from the source that defines it,
so nothing here is written twice:

- :func:`config_reference`: every key declared in ``omni_trainer.config`` through
  ``omni_trainer.keys`` (type, default, range or choices, engines, meaning, verl's route and
  the verl or verl-omni spellings folded into it);
- :func:`converter_layouts`: each ``trainer convert`` recipe's command line (its argparse
  parser) and raw layout (its module's docstring);
- :func:`benchmarks_page`: ``benchmarks/README.md`` itself, with the date of its last change.

Pages ask for a part with a marker line, ``<!-- generated: NAME -->`` (:data:`GENERATORS`).
The module imports no MkDocs, so tests call it directly.
"""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- generated: ([\w-]+) -->$", re.MULTILINE)
READ_BY = {"both": "both engines", "local": "the local engine", "verl": "the verl engine"}
OTHER = {"local": "the verl engine", "verl": "the local engine"}


def config_keys() -> list[Any]:
    """Every declared key of the trainer's schema (``omni_trainer.keys.DeclaredKey``), in field order."""
    from omni_trainer.config import Config
    from omni_trainer.keys import declared_keys

    return list(declared_keys(Config))


def key_anchor(name: str) -> str:
    """The reference page's anchor of key ``name`` (its dotted name, as users write it)."""
    return name


def _packaged_defaults() -> dict[str, Any]:
    """Each key's value in the packaged defaults (``omni_trainer.yaml``) where it sets one."""
    from omegaconf import OmegaConf
    from omni_trainer.config import packaged_yaml

    plain = OmegaConf.to_container(packaged_yaml("omni_trainer.yaml"), resolve=False)
    found: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for name, value in node.items():
                walk(value, f"{prefix}{name}.")
        else:
            found[prefix.rstrip(".")] = node

    walk(plain, "")
    return found


def _aliases() -> dict[str, list[str]]:
    """Our key -> the verl or verl-omni spellings the loader folds into it."""
    from omni_trainer.config import DATASET_CLASS_KEYS, KEY_ALIASES

    spelt: dict[str, list[str]] = {}
    for alias, key in KEY_ALIASES.items():
        spelt.setdefault(key, []).append(f"`{alias}`")
    for dataset_class, keys in DATASET_CLASS_KEYS.items():
        for key, value in keys.items():
            spelt.setdefault(key, []).append(f"`data.custom_cls.name={dataset_class}` (sets it to {_code(value)})")
    return spelt


def _code(value: Any) -> str:
    from omni_trainer.keys import shown

    text = shown(value) if not isinstance(value, (list, dict)) or value else ("[]" if isinstance(value, list) else "{}")
    return f"`{text}`" if text else '`""`'


def _type(tp: Any) -> str:
    name = tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")
    return f"`{name}`"


def _escape(text: str) -> str:
    """Text safe inside Markdown: ``<``/``>`` as entities (help texts name ``<run dir>``)."""
    return text.replace("<", "&lt;").replace(">", "&gt;")


BOUND_SIGNS = {">=": "≥", ">": ">", "<=": "≤", "<": "<"}


def _bound(op: str, value: float) -> str:
    number = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{_escape(BOUND_SIGNS[op])} {number}"


def key_entry(declared: Any, packaged: dict[str, Any], aliases: dict[str, list[str]]) -> str:
    """One key's entry of the reference."""
    doc = declared.doc
    name = declared.name
    leaf = name.rpartition(".")[2]
    lines = [f'### `{name}` {{ #{key_anchor(name)} data-toc-label="{leaf}" }}', "", _escape(doc.help) + ".", ""]
    facts = []
    if declared.section:
        facts.append(f"**section**: every key below `{name}` (`{declared.type.__name__}`)")
    else:
        facts.append(f"**type** {_type(declared.type)}")
        default = _code(declared.default)
        if name in packaged and packaged[name] != declared.default:
            default = f"{_code(packaged[name])} (packaged defaults; the schema's: {default})"
        facts.append(f"**default** {default}")
    bounds = [_bound(op, v) for op, v in doc.bounds()]
    if bounds:
        allowed = f" (or {', '.join(_code(v) for v in doc.allowed)})" if doc.allowed else ""
        facts.append(f"**range** {' and '.join(bounds)}{allowed}")
    if doc.choices:
        facts.append("**choices** " + ", ".join(f"`{choice}`" for choice in doc.choices))
    lines.append("- " + " · ".join(facts))
    read = f"**read by** {READ_BY[doc.engines]}"
    if doc.other_engine:
        read += f"; {OTHER[doc.engines]} {_escape(doc.other_engine)}"
    lines.append("- " + read)
    if doc.engines != "local":
        route = {"pass": f"sent as `{name}`", "mapped": "mapped by `omni_trainer.engines.verl.translate`",
                 "none": "not sent (verl has no such key)"}[doc.verl]
        lines.append(f"- **verl**: {route}")
    if name in aliases:
        lines.append("- **also spelt** (verl, verl-omni): " + ", ".join(aliases[name]))
    return "\n".join(lines) + "\n"


def config_reference() -> str:
    """The config reference: one entry per declared key, grouped by section (the sections in the
    order of their first key, the keys in the schema's order)."""
    packaged = _packaged_defaults()
    aliases = _aliases()
    keys = config_keys()
    groups: dict[str, list[str]] = {}
    for declared in keys:
        parent = declared.name.rpartition(".")[0] or "top level"
        groups.setdefault(parent, []).append(key_entry(declared, packaged, aliases))
    out = [f"{len(keys)} keys, in {len(groups)} sections.", ""]
    for parent, entries in groups.items():
        out += [f"## {parent}", "", *entries]
    return "\n".join(out)


def _rst_to_markdown(text: str) -> str:
    """A docstring's reST as Markdown: double-backtick literals, ``::`` blocks, roles."""
    text = re.sub(r":(?:func|class|mod|data|attr|meth):`~?([^`]+)`", r"`\1`", text)
    text = text.replace("``", "`")
    text = re.sub(r"::\n", ":\n", text)
    return _escape_outside_code(text)


def _escape_outside_code(text: str) -> str:
    parts = text.split("`")
    return "`".join(part if i % 2 else _escape(part) for i, part in enumerate(parts))


def _usage_formatter(prog: str) -> argparse.HelpFormatter:
    """Usage lines wrapped at a fixed width, whatever the terminal building the site."""
    return argparse.HelpFormatter(prog, width=90)


def converter_layouts() -> str:
    """Each converter recipe: its command line and the raw layout it reads (its module's docstring)."""
    from omni_data.convert.cli import RECIPES, build_parser

    parser = build_parser()
    # argparse has no public accessor for its subcommands' parsers.
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for recipe in RECIPES:
        sub = subparsers.choices[recipe]
        sub.prog = f"uv run trainer convert {recipe}"
        sub.formatter_class = _usage_formatter
        usage = sub.format_usage().strip()
        module = importlib.import_module(f"omni_data.convert.{recipe}")
        out += [f"### `{recipe}`", "", "```text", usage.removeprefix("usage: "), "```", "",
                _rst_to_markdown((module.__doc__ or "").strip()), ""]
    return "\n".join(out)


def benchmarks_page() -> str:
    """``benchmarks/README.md`` under the date of its last commit (its own title left out)."""
    source = ROOT / "benchmarks" / "README.md"
    text = source.read_text()
    text = re.sub(r"\A# .*\n", "", text)
    try:
        date = subprocess.run(["git", "log", "-1", "--format=%cs", "--", str(source)], cwd=ROOT,
                              capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        date = ""
    when = f"last changed {date}" if date else "date unknown (not a git checkout)"
    return (f"*This page is `benchmarks/README.md` ({when}), included when the site is built. Each "
            f"row of the table names the machine and its load; the sections below it give each "
            f"benchmark's settings and raw numbers.*\n\n{text}")


GENERATORS: dict[str, Callable[[], str]] = {
    "config-reference": config_reference,
    "converters": converter_layouts,
    "benchmarks": benchmarks_page,
}


def expand(markdown: str) -> str:
    """``markdown`` with each marker line replaced by its generated part.

    Raises:
        KeyError: a marker names no generator (the known names are listed).
    """
    def part(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise KeyError(f"<!-- generated: {name} --> names no generator; known: {', '.join(GENERATORS)}")
        return GENERATORS[name]()

    return MARKER.sub(part, markdown)
