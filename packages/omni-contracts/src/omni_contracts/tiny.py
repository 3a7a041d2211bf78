"""Shared pieces of the model packages' offline tiny checkpoints (tests, embedded defaults).

Each model package builds its own tiny checkpoint (its config class, its special tokens);
what every family needs the same way lives here:

- :func:`cached_build`: build once into a directory keyed by a hash of the settings (and
  the installed transformers version), reuse it afterwards, and never overwrite a foreign
  directory;
- :func:`train_bpe`: a small byte-level BPE (~4k entries) trained in well under a second on
  a built-in corpus, with the family's special tokens at the start of the vocabulary;
- :func:`chatml_template`: the ChatML chat template with the family's media placeholders.

Light like the rest of the package: ``tokenizers`` is imported inside :func:`train_bpe`
(model packages depend on it); nothing here imports torch or transformers. Wrapping the
trained vocabulary into a transformers tokenizer is the model package's job.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

MARKER = "omni_rl_tiny.json"
"""File written last into a finished build; it records the build key."""


def default_cache_dir() -> Path:
    """``$OMNI_RL_CACHE`` or ``$XDG_CACHE_HOME/omni-rl`` (``~/.cache/omni-rl``)."""
    explicit = os.environ.get("OMNI_RL_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "omni-rl"


def build_key(settings: Mapping[str, object]) -> str:
    """A 16-hex-digit hash of ``settings`` and the installed transformers version (a new
    transformers may write a checkpoint differently)."""
    try:
        transformers_version = version("transformers")
    except PackageNotFoundError:
        transformers_version = "absent"
    payload = {**settings, "transformers": transformers_version}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def cached_build(
    family: str,
    settings: Mapping[str, object],
    write: Callable[[Path], None],
    out_dir: str | Path | None = None,
) -> Path:
    """Write (or reuse) a tiny checkpoint and return its directory.

    ``write(staging)`` fills an empty staging directory beside the target, which is then
    renamed into place, so an interrupted build never leaves a half-written checkpoint.

    Args:
        family: folder name under the cache, e.g. ``"tiny-qwen3-omni"``.
        settings: everything the checkpoint depends on (sizes, seed, builder version);
            JSON-serialisable. Its hash names the default directory.
        write: writes the checkpoint into the directory it is given.
        out_dir: where to put it; default ``<cache>/<family>/<hash>``. A directory built
            from the same settings is reused; one built from others is an error.

    Raises:
        FileExistsError: ``out_dir`` holds another build or files that are not a build.
    """
    key = build_key(settings)
    target = Path(out_dir) if out_dir is not None else default_cache_dir() / family / key
    marker = target / MARKER
    if marker.exists():
        recorded = json.loads(marker.read_text()).get("key")
        if recorded == key:
            return target
        raise FileExistsError(
            f"{target} holds a tiny checkpoint built from other settings (key {recorded}, "
            f"wanted {key}); delete it or pass another out_dir."
        )
    if target.exists() and any(target.iterdir()):
        raise FileExistsError(f"{target} exists and is not a tiny checkpoint; choose an empty directory.")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tiny-", dir=target.parent))
    try:
        write(staging)
        (staging / MARKER).write_text(json.dumps({"key": key, **settings}, indent=2))
        if target.exists():
            target.rmdir()
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if (target / MARKER).exists():  # a concurrent build finished first
            return target
        raise
    return target


_WORDS: list[str] = (
    "the a an and or not is are was be to of in on at for with by from as it this that what "
    "which who how many much more less total each every all some none answer question number "
    "sum difference product half twice three four five six seven eight nine ten hundred apples "
    "books coins cats dogs birds cars hours minutes days weeks dollars cents meters liters "
    "red blue green yellow black white big small left right up down yes no true false image "
    "audio video sound picture tone shows hear see listen look describe think step first then "
    "finally therefore so because if else buys sells has have gives takes eats reads runs "
    "walks school store farm park city teacher student friend mother father sister brother"
).split()


def _pseudo_words(rng: random.Random, count: int) -> list[str]:
    """Pronounceable made-up words, so that BPE has enough distinct pieces to merge."""
    onsets = "b c d f g h j k l m n p r s t v w z br cl dr fl gr pl st th sh ch".split()
    vowels = "a e i o u ai ea oo ou".split()
    codas = ["", "", "n", "r", "s", "t", "l", "m", "ng", "ck"]
    words: set[str] = set()
    while len(words) < count:
        syllables = rng.choice((1, 2, 2, 3))
        words.add("".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(syllables)))
    return sorted(words)


def training_corpus(seed: int = 0, lines: int = 8000) -> Iterator[str]:
    """Deterministic text: arithmetic, short word problems, chat turns, and made-up words
    drawn with Zipf-like frequencies (frequent ones become single tokens)."""
    rng = random.Random(seed)
    lexicon = _WORDS + _pseudo_words(rng, 6000)
    weights = [1.0 / (rank + 1) for rank in range(len(lexicon))]
    for _ in range(lines):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        op = rng.choice("+-*/")
        words = " ".join(rng.choices(lexicon, weights, k=rng.randint(4, 14)))
        yield f"{words.capitalize()}? {a} {op} {b} = {rng.randint(0, 9999)}."
        yield f"The answer is \\boxed{{{a}}}. <answer>{b}</answer> #### {a + b}"
        yield f"system\nYou are a helpful assistant.\nuser\n{words}\nassistant\n{a}"


def train_bpe(
    vocab_size: int,
    special_tokens: Sequence[str],
    pretokenize_regex: str,
    seed: int = 0,
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Train a byte-level BPE on :func:`training_corpus`; return its vocabulary and merges.

    The normalizer (NFC) and pre-tokenizer (``pretokenize_regex``, then byte level) are
    those of Qwen's tokenizers, so the merges carry over when the model package wraps them
    (e.g. ``Qwen2Tokenizer(vocab=..., merges=..., ...)``, passing transformers'
    ``PRETOKENIZE_REGEX`` here). ``special_tokens`` take the first ids, in order.
    """
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pretokenize_regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(training_corpus(seed), trainer)
    model: dict[str, Any] = json.loads(bpe.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    return dict(model["vocab"]), [(str(left), str(right)) for left, right in merges]


def chatml_template(*, image: str, audio: str, video: str) -> str:
    """The ChatML chat template with the given placeholder for each medium.

    A message's content is a string or a list of parts: ``{"type": "text", "text": ...}``,
    ``{"type": "image"|"image_url", ...}``, ``{"type": "audio"|"audio_url", ...}`` or
    ``{"type": "video"|"video_url", ...}``. Each media part becomes its placeholder, e.g.
    ``"<|vision_start|><|image_pad|><|vision_end|>"``: start token, one pad token (the
    processor expands it to the medium's length), end token. Other part types raise.
    """
    return (
        "{%- for message in messages -%}"
        "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
        "{%- if message['content'] is string -%}"
        "{{- message['content'] -}}"
        "{%- else -%}"
        "{%- for part in message['content'] -%}"
        "{%- if part['type'] == 'text' -%}{{- part['text'] -}}"
        "{%- elif part['type'] in ('image', 'image_url') -%}"
        f"{{{{- '{image}' -}}}}"
        "{%- elif part['type'] in ('audio', 'audio_url') -%}"
        f"{{{{- '{audio}' -}}}}"
        "{%- elif part['type'] in ('video', 'video_url') -%}"
        f"{{{{- '{video}' -}}}}"
        "{%- else -%}"
        "{{- raise_exception('Unknown content part type: ' + part['type']) -}}"
        "{%- endif -%}"
        "{%- endfor -%}"
        "{%- endif -%}"
        "{{- '<|im_end|>\\n' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
    )


__all__ = [
    "MARKER",
    "build_key",
    "cached_build",
    "chatml_template",
    "default_cache_dir",
    "train_bpe",
    "training_corpus",
]
