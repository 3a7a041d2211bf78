"""Qwen3-Omni for omni-rl: the thinker's training adapter, the rollout adapter, and an
offline tiny Qwen3-Omni (``omni_qwen3.tiny``).

Installed model packages are found through the ``omni_rl.models`` entry point, which
imports ``omni_qwen3.adapters``; importing this package itself loads nothing heavy.
"""
