from __future__ import annotations

import subprocess
import sys


def test_importing_omni_data_loads_no_torch_or_transformers() -> None:
    code = (
        "import sys, omni_data, omni_data.convert.cli; "
        "print(sorted(m for m in ('torch', 'transformers', 'qwen_omni_utils', 'librosa') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
