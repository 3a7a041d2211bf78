"""A tiny Qwen3-Omni whose thinker answers its questions and stops, as a trained one does.

A randomly drawn thinker repeats one token until its length limit, so every answer it gives is
cut: vLLM-Omni's talker is then conditioned one text row short of the stored source, and the
speech sample is masked out of training. A talker run needs answers that end on
``<|im_end|>``; a few steps of supervised fine-tuning of the thinker alone (the talker and
code2wav are left as drawn) teach it one short answer to the questions the run asks.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

STEPS = 60
LEARNING_RATE = 3e-3


def teach_answer(model_dir: Path, questions: Sequence[str], answer: str, out: Path) -> Path:
    """``model_dir`` with its thinker fine-tuned so that, greedy, each of ``questions`` (a user
    turn) gets ``answer`` and then ``<|im_end|>``; written to ``out`` (kept if present).

    Raises:
        AssertionError: the thinker still does not answer a question exactly.
    """
    import torch
    from transformers import AutoProcessor, Qwen3OmniMoeForConditionalGeneration

    if (out / "model.safetensors").is_file():
        return out
    processor = AutoProcessor.from_pretrained(model_dir)
    model = Qwen3OmniMoeForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32)
    thinker = model.thinker.train()
    end = model.config.im_end_token_id
    rows = []
    for question in questions:
        messages = [{"role": "user", "content": [{"type": "text", "text": question}]}]
        prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt_ids = processor.tokenizer(prompt).input_ids
        answer_ids = [*processor.tokenizer.encode(answer), end]
        rows.append((prompt_ids, answer_ids))
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(thinker.parameters(), lr=LEARNING_RATE)
    for _ in range(STEPS):
        optimizer.zero_grad()
        for prompt_ids, answer_ids in rows:
            ids = torch.tensor([prompt_ids + answer_ids])
            labels = torch.tensor([[-100] * len(prompt_ids) + answer_ids])
            thinker(input_ids=ids, labels=labels).loss.backward()
        optimizer.step()
    thinker.eval()
    with torch.no_grad():
        for prompt_ids, answer_ids in rows:
            ids = torch.tensor([prompt_ids])
            for _ in range(len(answer_ids)):
                next_id = thinker(input_ids=ids).logits[0, -1].argmax()
                ids = torch.cat([ids, next_id.view(1, 1)], dim=1)
            assert ids[0, len(prompt_ids):].tolist() == answer_ids, "the thinker did not learn its answers"
    staging = out.with_name(out.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(model_dir, staging)
    model.save_pretrained(staging)
    # The config as built: saving writes the training dtype (float32) into every sub-config, and
    # vLLM-Omni's code2wav then builds fp32 layers under a bf16 engine.
    shutil.copy(model_dir / "config.json", staging / "config.json")
    staging.rename(out)
    return out
