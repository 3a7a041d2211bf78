"""Every command the docs show in a shell block runs under a test, or its block says it is
illustrative.

The convention: a fenced block in ``bash``, ``sh``, ``shell`` or ``console`` holds commands.
Either its fence carries ``title="illustrative: <why no test runs it>"`` (rendered as the
block's caption, so a reader sees it too), or each of its commands is a key of :data:`TESTED`,
whose value names the test that runs it (``path::test``) or the CI script that does. A command
is written here as the docs write it: continuation lines joined, comments dropped, whitespace
collapsed. The README's shell blocks, and those of the generated parts (the benchmarks page includes
``benchmarks/README.md``), follow the same rule.
"""

from __future__ import annotations

import re
from pathlib import Path

from docs_source import ILLUSTRATIVE, ROOT, SHELL_LANGUAGES, Block, fenced_blocks, omni_docs, pages

TESTED: dict[str, str] = {
    "uv run trainer":
        "apps/trainer/tests/engines/local/test_local_run.py::test_embedded_default_learns",
    "uv run pytest":
        ".ci/run",
    "uv run --group docs mkdocs build --strict":
        "tests/docs/test_site.py::test_the_site_builds_in_strict_mode",
    "uv run trainer actor_rollout_ref.model.stage=talker":
        "apps/trainer/tests/engines/local/test_talker_run.py::"
        "test_talker_stage_trains_only_the_talker_and_writes_speech_samples",
    "uv run trainer algorithm.sample_source=offline":
        "apps/trainer/tests/engines/local/test_preference_run.py::"
        "test_the_embedded_preference_run_learns_on_every_modality",
    "uv run python -m omni_qwen25.tiny":
        "tests/test_adding_a_model_doc.py::test_the_end_to_end_command_passes_the_preflight",
    "uv run trainer actor_rollout_ref.model.path=<tiny> trainer.total_training_steps=3":
        "tests/test_adding_a_model_doc.py::test_the_end_to_end_command_passes_the_preflight",
}
"""Each command the docs show outside an illustrative block -> the test (or CI script) that runs it."""


def shell_blocks() -> list[Block]:
    """The shell blocks of every page as built (generated parts included) and of the README."""
    expand = omni_docs().expand
    blocks = [block for page in pages() for block in fenced_blocks(page, expand(page.read_text()))]
    blocks += fenced_blocks(ROOT / "README.md")
    return [block for block in blocks if block.language in SHELL_LANGUAGES]


def test_every_shown_command_is_tested_or_illustrative() -> None:
    blocks = shell_blocks()
    assert len(blocks) > 10
    untested = [f"{block.page.relative_to(ROOT)}:{block.line}: {command}"
                for block in blocks if not block.illustrative
                for command in block.commands() if command not in TESTED]
    assert untested == [], (
        "run these under a test and add them to TESTED, or label their block "
        f'{ILLUSTRATIVE}: <why>": {untested}')


def test_an_illustrative_label_says_why() -> None:
    vague = [f"{block.page.relative_to(ROOT)}:{block.line}" for block in shell_blocks()
             if block.illustrative and not re.search(r'title="illustrative: \S', block.info)]
    assert vague == []


def test_every_tested_command_is_shown_and_its_test_exists() -> None:
    shown = {command for block in shell_blocks() if not block.illustrative for command in block.commands()}
    assert sorted(set(TESTED) - shown) == [], "TESTED lists commands no page shows"
    for command, test in TESTED.items():
        path, _, name = test.partition("::")
        source = ROOT / path
        assert source.is_file(), (command, test)
        if name:
            assert re.search(rf"^def {re.escape(name)}\(", source.read_text(), re.MULTILINE), (command, test)
        else:
            assert command.removeprefix("uv ") in source.read_text(), (command, test)


def test_the_block_reader_joins_continuations_and_drops_comments(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text('Text.\n\n- item:\n\n  ```bash title="illustrative: x"\n  uv run trainer a=1 \\\n'
                    '      b=2   # why\n  # a comment\n  ```\n')
    (block,) = fenced_blocks(page)
    assert block.illustrative and block.commands() == ["uv run trainer a=1 b=2"]
