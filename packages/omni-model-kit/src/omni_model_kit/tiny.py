"""Offline tiny checkpoints of the model packages (tests, the embedded default, laptops).

Each model package builds its own tiny checkpoint (its config, its special tokens, its
speech stages); what every Qwen-family omni checkpoint needs the same way lives here:

- :class:`TinySpec`: the sizes every family has (a family with more subclasses it);
- :func:`build_tiny`, :func:`cached_build`: build once into a directory keyed by a hash of
  the settings (and the installed transformers version), reuse it afterwards, and never
  overwrite a foreign directory;
- :func:`train_bpe`, :func:`qwen_tokenizer`: a small byte-level BPE (~4k entries) trained in
  well under a second on a built-in corpus, with the family's special tokens at the start of
  the vocabulary, wrapped as transformers' ``Qwen2Tokenizer``; :class:`MediaTokens`: the
  family's media tokens, for the tokenizer and the ChatML template;
- :func:`single_token_ids`: the ids a config needs, read from that tokenizer;
  :func:`mrope`, :func:`text_config`, :func:`encoder_configs`, :func:`talker_decoder`: the
  config pieces sized from a :class:`TinySpec` the same way in every family;
- :func:`seeded_model`, :func:`qwen_processor`, :func:`save_checkpoint`: the seeded model,
  the processor, and the files written (the chat template beside the tokenizer, as real
  Qwen-Omni checkpoints ship it);
- :func:`tiny_cli`: ``python -m <package>.tiny --out DIR [--seed N]``.

Importing this module loads nothing heavy: ``tokenizers``, ``transformers`` and ``torch``
are imported by the functions that use them.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_model_kit.chat_template import chatml_template

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

MARKER = "omni_rl_tiny.json"
"""File written last into a finished build; it records the build key."""


@dataclass(frozen=True)
class TinySpec:
    """Sizes of a tiny thinker/talker model. The defaults run a GRPO step on a laptop CPU in
    well under a second; with a 4k vocabulary the embeddings no longer dominate the
    parameters. A family with more sizes (experts, code groups) subclasses it.

    Every attention head is :data:`MIN_SERVED_HEAD_DIM` wide: vLLM's CPU attention kernels
    take no smaller head (``vllm/v1/attention/backends/cpu_attn.py``), and the tiny model must
    load in vLLM and vLLM-Omni as it does in transformers."""

    vocab_size: int = 4096
    text_hidden_size: int = 64
    text_layers: int = 2
    text_heads: int = 2
    text_kv_heads: int = 1
    vision_hidden_size: int = 32
    vision_depth: int = 2
    audio_hidden_size: int = 32
    audio_layers: int = 2
    talker_hidden_size: int = 32
    talker_head_dim: int = 32
    codec_vocab_size: int = 64


MIN_SERVED_HEAD_DIM = 32
"""The smallest head dimension vLLM's CPU attention supports (its list: 32, 64, 80, 96, 112,
128, 160, 192, 224, 256, 512)."""


@dataclass(frozen=True)
class MediaTokens:
    """A Qwen-Omni family's media tokens: the pad of each medium (one per item in a chat
    template; the processor expands it) and the start and end tokens around it."""

    image: str
    video: str
    audio: str
    vision_start: str
    vision_end: str
    audio_start: str
    audio_end: str

    def named_tokens(self) -> dict[str, str]:
        """The tokenizer attributes a Qwen-Omni processor reads (``image_token``, ...)."""
        return {
            "image_token": self.image,
            "video_token": self.video,
            "audio_token": self.audio,
            "vision_bos_token": self.vision_start,
            "vision_eos_token": self.vision_end,
            "audio_bos_token": self.audio_start,
            "audio_eos_token": self.audio_end,
        }

    def chat_template(self) -> str:
        """:func:`~omni_model_kit.chat_template.chatml_template` with start, pad and end
        token for each medium."""
        return chatml_template(
            image=self.vision_start + self.image + self.vision_end,
            audio=self.audio_start + self.audio + self.audio_end,
            video=self.vision_start + self.video + self.vision_end,
        )


def mrope(spec: TinySpec, **extra: Any) -> dict[str, Any]:
    """The thinker's rope parameters: 3-D mrope over a quarter and two eighths of the head
    dimension; ``extra`` adds the family's own keys."""
    return {"rope_type": "default", "rope_theta": 1_000_000.0,
            "mrope_section": mrope_section(spec.text_hidden_size // spec.text_heads), **extra}


def mrope_section(head_dim: int) -> list[int]:
    """3-D mrope's split of half a head: a quarter of the head for time, an eighth each for
    height and width."""
    return [head_dim // 4, head_dim // 8, head_dim // 8]


def text_config(spec: TinySpec, vocab_size: int, ids: Mapping[str, int], rope: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """The thinker's text decoder (``pad`` and ``im_end`` from ``ids``); ``extra`` adds the
    family's own keys."""
    hidden = spec.text_hidden_size
    return {
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": spec.text_layers,
        "num_attention_heads": spec.text_heads,
        "num_key_value_heads": spec.text_kv_heads,
        "max_position_embeddings": 4096,
        "rope_parameters": dict(rope),
        "tie_word_embeddings": False,  # vLLM reads it from the text config
        "pad_token_id": ids["pad"],
        "eos_token_id": ids["im_end"],
        **extra,
    }


def encoder_configs(
    spec: TinySpec, patch_size: int, *, vision: Mapping[str, Any], audio: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """The thinker's ``vision_config`` (``patch_size`` as the processor's) and ``audio_config``
    (128 mel bins, as the processor's feature extractor); ``vision`` and ``audio`` add the
    family's own keys."""
    return {
        "vision_config": {
            "depth": spec.vision_depth,
            "hidden_size": spec.vision_hidden_size,
            "intermediate_size": 2 * spec.vision_hidden_size,
            "num_heads": 2,
            "patch_size": patch_size,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": spec.text_hidden_size,
            **vision,
        },
        "audio_config": {
            "num_mel_bins": 128,
            "encoder_layers": spec.audio_layers,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": 2 * spec.audio_hidden_size,
            "d_model": spec.audio_hidden_size,
            "output_dim": spec.text_hidden_size,
            "max_source_positions": 1500,
            **audio,
        },
    }


def talker_decoder(spec: TinySpec) -> dict[str, Any]:
    """A one-layer decoder over the codec vocabulary (the talker's, and its code predictor's)."""
    return {
        "vocab_size": spec.codec_vocab_size,
        "hidden_size": spec.talker_hidden_size,
        "intermediate_size": 2 * spec.talker_hidden_size,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": spec.talker_head_dim,
    }


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


def qwen_tokenizer(
    special_tokens: Sequence[str], media: MediaTokens, vocab_size: int = 4096, seed: int = 0
) -> PreTrainedTokenizerBase:
    """:func:`train_bpe` wrapped as a transformers ``Qwen2Tokenizer``: ``special_tokens``
    (the family's, in its id order) take the first ids; ``media`` names the tokens the
    family's processor reads. Its ids differ from the real model's: read ids from the
    tokenizer."""
    from tokenizers import AddedToken
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX, Qwen2Tokenizer

    vocab, merges = train_bpe(vocab_size, special_tokens, PRETOKENIZE_REGEX, seed=seed)
    options: dict[str, Any] = {
        "vocab": vocab,
        "merges": merges,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,  # byte-level: every input has tokens
        "extra_special_tokens": media.named_tokens(),
    }
    tokenizer = Qwen2Tokenizer(**options)
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in special_tokens])
    return tokenizer


def single_token_ids(tokenizer: PreTrainedTokenizerBase, texts: Mapping[str, str]) -> dict[str, int]:
    """The id of each text in ``texts`` (name -> text), read from ``tokenizer``; the defaults
    of a config class are the real model's ids and are wrong for a tiny vocabulary.

    Raises:
        ValueError: a text is not one token.
    """

    def single(text: str) -> int:
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) != 1:
            raise ValueError(f"The tiny tokenizer splits {text!r} into {ids}; it must be one token.")
        return int(ids[0])

    return {name: single(text) for name, text in texts.items()}


def seeded_model(model_class: Any, config: Any, seed: int) -> Any:
    """``model_class(config)`` in eval mode, its weights drawn after ``torch.manual_seed(seed)``;
    ``config.architectures`` names the class."""
    import torch

    config.architectures = [model_class.__name__]
    torch.manual_seed(seed)
    return model_class(config).eval()


def qwen_processor(processor_class: Any, tokenizer: PreTrainedTokenizerBase, chat_template: str, patch_size: int) -> Any:
    """``processor_class`` (a Qwen-Omni processor) around ``tokenizer``: Qwen2-VL image and
    video processors with ``patch_size``, small pictures (2 to 8 patches a side), and a
    Whisper feature extractor (128 mel bins, 16 kHz)."""
    from transformers import WhisperFeatureExtractor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    pixels = {"min_pixels": (2 * patch_size) ** 2, "max_pixels": (8 * patch_size) ** 2}
    vision = {"patch_size": patch_size, "temporal_patch_size": 2, "merge_size": 2}
    return processor_class(
        image_processor=Qwen2VLImageProcessor(**vision, **pixels),
        video_processor=Qwen2VLVideoProcessor(**vision, **pixels),
        feature_extractor=WhisperFeatureExtractor(feature_size=128, sampling_rate=16000),
        tokenizer=tokenizer,
        chat_template=chat_template,
    )


def save_checkpoint(out: Path, model: Any, processor: Any, tokenizer: Any, chat_template: str) -> None:
    """Write the model, processor and tokenizer into ``out``. The chat template ships beside
    the tokenizer in ``chat_template.json``, as Qwen-Omni checkpoints do; the tokenizer config
    carries none, so loaders must fall back to that file."""
    model.save_pretrained(out)
    processor.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "chat_template.json").write_text(json.dumps({"chat_template": chat_template}, indent=2))
    path = out / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config.pop("chat_template", None)
    path.write_text(json.dumps(config, indent=2))
    (out / "chat_template.jinja").unlink(missing_ok=True)


def build_tiny(
    family: str,
    spec: Any,
    seed: int,
    builder_version: int,
    write: Callable[[Path, Any, int], None],
    out_dir: str | Path | None = None,
) -> Path:
    """Write (or reuse) a tiny checkpoint and return its directory: :func:`cached_build` of
    ``write(staging, spec, seed)``.

    Args:
        family: the folder under the cache, e.g. ``"tiny-qwen3-omni"``.
        spec: model sizes (a :class:`TinySpec`).
        seed: seeds the weights (the tokenizer corpus is fixed).
        builder_version: bumped whenever the written checkpoint changes for the same spec
            and seed.
        write: writes the checkpoint into the directory it is given.
        out_dir: where to write it; default ``<cache>/<family>/<hash>``. An existing
            directory built from the same spec and seed is reused; one built from another
            is an error (delete it or choose another directory).
    """
    settings = {"spec": dataclasses.asdict(spec), "seed": seed, "builder": builder_version}
    return cached_build(family, settings, lambda staging: write(staging, spec, seed), out_dir)


def tiny_cli(argv: list[str] | None = None, *, package: str, family: str, build: Callable[..., Path]) -> int:
    """``python -m <package>.tiny --out DIR [--seed N]``: build (or reuse) the tiny checkpoint
    with ``build(out_dir, seed=...)`` and print its directory."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {package}.tiny", description=f"Build {package}'s offline tiny checkpoint."
    )
    parser.add_argument("--out", help=f"output directory (default: under {default_cache_dir() / family})")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    path = build(args.out, seed=args.seed)
    print(f"{path}  ({time.perf_counter() - started:.1f} s)")
    return 0


__all__ = [
    "MARKER",
    "MediaTokens",
    "TinySpec",
    "build_key",
    "build_tiny",
    "cached_build",
    "default_cache_dir",
    "encoder_configs",
    "mrope",
    "qwen_processor",
    "qwen_tokenizer",
    "save_checkpoint",
    "seeded_model",
    "single_token_ids",
    "talker_decoder",
    "text_config",
    "tiny_cli",
    "train_bpe",
    "training_corpus",
]


CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_chat_lm(out_dir: str | Path | None = None, seed: int = 0) -> Path:
    """(Or reuse) a tiny text-only ``Qwen2ForCausalLM`` with an offline 1024-entry BPE and a
    ChatML template: a chat model for tests that need one that is not an omni model (a judge)."""
    settings = {"family": "tiny-chat-lm", "vocab": 1024, "hidden": 64, "layers": 2, "seed": seed, "builder": 1}

    def write(out: Path) -> None:
        import torch
        from transformers import Qwen2Config, Qwen2ForCausalLM
        from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX, Qwen2Tokenizer

        vocab, merges = train_bpe(1024, ("<|endoftext|>", "<|im_start|>", "<|im_end|>"), PRETOKENIZE_REGEX)
        options: dict[str, Any] = {"vocab": vocab, "merges": merges, "eos_token": "<|im_end|>",
                                   "pad_token": "<|endoftext|>", "unk_token": None}  # byte-level: no unknowns
        tokenizer = Qwen2Tokenizer(**options)
        tokenizer.chat_template = CHATML_TEMPLATE
        config = Qwen2Config(
            vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False,
        )
        torch.manual_seed(seed)
        Qwen2ForCausalLM(config).save_pretrained(out)
        tokenizer.save_pretrained(out)

    return cached_build("tiny-chat-lm", settings, write, out_dir)


VISION_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                 "<|image_pad|>", "<|video_pad|>")
VISION_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for part in m['content'] %}"
    "{% if part['type'] == 'image' or part['type'] == 'image_url' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TINY_VISION_PATCH = 14
"""The tiny vision model's patch side (its encoder's and its image processor's)."""


def build_tiny_vision_lm(out_dir: str | Path | None = None, seed: int = 0) -> Path:
    """(Or reuse) a tiny ``Qwen2VLForConditionalGeneration`` (mrope, a 2-block vision tower) with
    an offline 512-entry BPE, Qwen2-VL's media tokens, a ChatML template with image parts, and
    transformers' ``Qwen2VLProcessor`` (pictures of 2 to 4 patches a side): an image-text model
    that is not an omni model (a third-party package's, a vision judge)."""
    settings = {"family": "tiny-vision-lm", "vocab": 512, "hidden": 64, "layers": 2, "seed": seed, "builder": 1}

    def write(out: Path) -> None:
        import torch
        from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLProcessor
        from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX, Qwen2Tokenizer
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
        from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

        vocab, merges = train_bpe(512, VISION_TOKENS, PRETOKENIZE_REGEX)
        options: dict[str, Any] = {"vocab": vocab, "merges": merges, "eos_token": "<|im_end|>",
                                   "pad_token": "<|endoftext|>", "unk_token": None,
                                   "extra_special_tokens": {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"}}
        tokenizer = Qwen2Tokenizer(**options)
        tokenizer.chat_template = VISION_TEMPLATE
        ids = {token: tokenizer.get_vocab()[token] for token in VISION_TOKENS}
        patch = TINY_VISION_PATCH
        config = Qwen2VLConfig(
            text_config={
                "vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024,
                "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [4, 2, 2]},
                "eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"], "bos_token_id": None,
            },
            vision_config={"depth": 2, "embed_dim": 32, "hidden_size": 64, "mlp_ratio": 2, "num_heads": 2,
                           "patch_size": patch, "spatial_merge_size": 2, "temporal_patch_size": 2},
            image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
            vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
            tie_word_embeddings=False,
        )
        config.architectures = ["Qwen2VLForConditionalGeneration"]
        torch.manual_seed(seed)
        model = Qwen2VLForConditionalGeneration(config)
        vision = {"patch_size": patch, "temporal_patch_size": 2, "merge_size": 2,
                  "min_pixels": (2 * patch) ** 2, "max_pixels": (4 * patch) ** 2}
        processor = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(**vision),
                                     video_processor=Qwen2VLVideoProcessor(**vision), tokenizer=tokenizer,
                                     chat_template=VISION_TEMPLATE)
        model.save_pretrained(out)
        processor.save_pretrained(out)
        tokenizer.save_pretrained(out)

    return cached_build("tiny-vision-lm", settings, write, out_dir)
