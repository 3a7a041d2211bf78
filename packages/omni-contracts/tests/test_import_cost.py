from __future__ import annotations

import subprocess
import sys


def test_importing_the_contracts_loads_no_heavy_library() -> None:
    script = (
        "import sys, omni_contracts, omni_contracts.testing\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'numpy', 'tokenizers') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
