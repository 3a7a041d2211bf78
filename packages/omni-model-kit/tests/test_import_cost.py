from __future__ import annotations

import subprocess
import sys


def test_importing_the_kit_loads_no_heavy_library() -> None:
    """A model package's adapters import the kit when its entry point loads (``trainer
    --list-models``, every registry miss): the kit imports torch and transformers where it
    uses them."""
    script = (
        "import sys, omni_model_kit.chat_template, omni_model_kit.rollout_adapter, omni_model_kit.thinker_adapter, "
        "omni_model_kit.thinker_policy, omni_model_kit.thinker_processor, omni_model_kit.tiny\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'numpy', 'tokenizers') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
