"""A tiny judge, built offline: the tiny chat model taught to answer a rubric as a rule does.

A judged reward needs a judge whose verdicts mean something; a random tiny model answers
noise. :func:`build_tiny_judge` fine-tunes :func:`omni_model_kit.tiny.build_tiny_chat_lm` on
``(prompt, answer)`` pairs drawn fresh at every step from ``examples`` (the caller's rubric and
rule), then measures its greedy answers on held-out pairs; the checkpoint is cached like the
other tiny models, keyed by ``name`` (which names the rule and its version) and the sizes.
On the 2-core CPU this was built on, the built-in task's judge (600 steps of 64 pairs)
trains in about a minute and a half and agrees with its rule on 99.5% of 200 held-out answers.
:func:`build_tiny_vision_judge` does the same with the tiny vision model, for a judge shown
pictures (OmniVideo-R1 QI's: 100 steps of 16 conversations, about a minute and a half).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omni_model_kit.tiny import build_tiny_chat_lm, build_tiny_vision_lm, cached_build

Example = tuple[str, str]
"""A user message and the judge's expected answer."""
AGREEMENT_FILE = "judge_agreement.json"


def build_tiny_judge(
    name: str, examples: Callable[[random.Random], Example], *, steps: int = 600, batch: int = 64,
    lr: float = 3e-3, held_out: int = 200, min_agreement: float = 0.98, seed: int = 0,
    out_dir: str | Path | None = None,
) -> Path:
    """(Or reuse) a tiny judge that answers ``examples``' user messages with their answers.

    Raises:
        RuntimeError: its greedy answers agree with the rule on less than ``min_agreement`` of
            ``held_out`` fresh examples (nothing is cached then).
    """
    settings = {"family": "tiny-judge", "name": name, "steps": steps, "batch": batch, "lr": lr, "seed": seed,
                "builder": 1}
    return cached_build("tiny-judge", settings,
                        lambda out: _train(out, examples, steps, batch, lr, held_out, min_agreement, seed), out_dir)


def _train(out: Path, examples: Callable[[random.Random], Example], steps: int, batch: int, lr: float,
           held_out: int, min_agreement: float, seed: int) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = build_tiny_chat_lm(seed=seed)
    tokenizer = AutoTokenizer.from_pretrained(base)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)

    def make_batch(drawn: list[Example]) -> dict[str, Any]:
        ids, mask, labels = _batch(tokenizer, drawn)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    _fit(out, model, tokenizer, examples, make_batch, lambda drawn: _answer(model, tokenizer, drawn[0]),
         steps=steps, batch=batch, lr=lr, held_out=held_out, min_agreement=min_agreement, seed=seed)


def _fit(out: Path, model: Any, saved_with: Any, examples: Callable[[random.Random], Any],
         make_batch: Callable[[list[Any]], dict[str, Any]], answer: Callable[[Any], str], *, steps: int, batch: int,
         lr: float, held_out: int, min_agreement: float, seed: int) -> None:
    """Teach ``model`` the examples' answers (AdamW, the rate decaying linearly over the last
    third), measure its greedy answers (``answer``) on ``held_out`` fresh examples (each ending
    with its expected answer), and save it with ``saved_with`` (its tokenizer or processor)
    when they agree often enough."""
    import torch

    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    decay = max(1, steps // 3)
    model.train()
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr * min(1.0, (steps - step) / decay)
        loss = model(**make_batch([examples(rng) for _ in range(batch)])).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    agreement = sum(answer(drawn) == drawn[-1] for drawn in (examples(rng) for _ in range(held_out))) / held_out
    if agreement < min_agreement:
        raise RuntimeError(f"the tiny judge agrees with its rule on {agreement:.1%} of {held_out} held-out examples, "
                           f"under {min_agreement:.0%}: train it longer (steps) or simplify the rubric")
    model.save_pretrained(out)
    saved_with.save_pretrained(out)
    (out / AGREEMENT_FILE).write_text(json.dumps({"held_out": held_out, "agreement": agreement}))


def _batch(tokenizer: Any, pairs: list[Example]) -> tuple[Any, Any, Any]:
    """Right-padded ids of each chat-templated message and its answer, their mask, and labels on
    the answer."""
    import torch

    rows = []
    for message, answer in pairs:
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": message}], add_generation_prompt=True,
                                               tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False).input_ids
        answer_ids = tokenizer(answer + tokenizer.eos_token, add_special_tokens=False).input_ids
        rows.append((prompt_ids, answer_ids))
    width = max(len(p) + len(a) for p, a in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100)
    for row, (prompt_ids, answer_ids) in enumerate(rows):
        length = len(prompt_ids) + len(answer_ids)
        ids[row, :length] = torch.tensor(prompt_ids + answer_ids)
        mask[row, :length] = 1
        labels[row, len(prompt_ids):length] = torch.tensor(answer_ids)
    return ids, mask, labels


def _answer(model: Any, tokenizer: Any, message: str) -> str:
    """The judge's greedy answer to ``message``."""
    import torch

    ids = tokenizer.apply_chat_template([{"role": "user", "content": message}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=24, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return str(tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True))


VisionExample = tuple[list[dict[str, Any]], list[Any], str]
"""Chat messages (``{"type": "image"}`` parts where the pictures go), the pictures (PIL), and
the judge's expected answer."""


def build_tiny_vision_judge(
    name: str, examples: Callable[[random.Random], VisionExample], *, steps: int = 300, batch: int = 32,
    lr: float = 3e-3, held_out: int = 100, min_agreement: float = 0.98, seed: int = 0,
    out_dir: str | Path | None = None,
) -> Path:
    """(Or reuse) a tiny vision judge: :func:`omni_model_kit.tiny.build_tiny_vision_lm` taught
    to answer ``examples``' conversations, pictures included, as :func:`build_tiny_judge` teaches
    the chat model.

    Raises:
        RuntimeError: its greedy answers agree with the rule on less than ``min_agreement`` of
            ``held_out`` fresh examples (nothing is cached then).
    """
    settings = {"family": "tiny-vision-judge", "name": name, "steps": steps, "batch": batch, "lr": lr, "seed": seed,
                "builder": 1}
    return cached_build("tiny-vision-judge", settings,
                        lambda out: _train_vision(out, examples, steps, batch, lr, held_out, min_agreement, seed),
                        out_dir)


def _train_vision(out: Path, examples: Callable[[random.Random], VisionExample], steps: int, batch: int, lr: float,
                  held_out: int, min_agreement: float, seed: int) -> None:
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    base = build_tiny_vision_lm(seed=seed)
    processor = AutoProcessor.from_pretrained(base)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_pretrained(base, dtype=torch.float32)
    _fit(out, model, processor, examples, lambda drawn: _vision_batch(processor, drawn),
         lambda drawn: _vision_answer(model, processor, drawn[0], drawn[1]),
         steps=steps, batch=batch, lr=lr, held_out=held_out, min_agreement=min_agreement, seed=seed)


def _vision_batch(processor: Any, examples: list[VisionExample]) -> dict[str, Any]:
    """The processor's right-padded inputs of each conversation and its answer, with labels on
    the answer (the prompt's length counted with its pictures' tokens expanded)."""
    tokenizer = processor.tokenizer
    tokenizer.padding_side = "right"
    prompts = [processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
               for messages, _, _ in examples]
    images = [image for _, pictures, _ in examples for image in pictures] or None
    full = processor(text=[p + a + tokenizer.eos_token for p, (_, _, a) in zip(prompts, examples, strict=True)],
                     images=images, padding=True, return_tensors="pt")
    prompt_lengths = processor(text=prompts, images=images, padding=True, return_tensors="pt")["attention_mask"].sum(1)
    labels = full["input_ids"].clone()
    labels[full["attention_mask"] == 0] = -100
    for row, length in enumerate(prompt_lengths.tolist()):
        labels[row, :length] = -100
    return {**full, "labels": labels}


def _vision_answer(model: Any, processor: Any, messages: list[dict[str, Any]], images: list[Any]) -> str:
    """The vision judge's greedy answer to one conversation."""
    import torch

    prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[prompt], images=images or None, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=24, do_sample=False,
                             pad_token_id=processor.tokenizer.pad_token_id)
    return str(processor.tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))
