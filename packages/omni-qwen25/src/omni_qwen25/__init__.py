"""Qwen2.5-Omni for omni-rl: the thinker's training adapter, the rollout adapter, and an
offline tiny Qwen2.5-Omni (``omni_qwen25.tiny``).

Installed model packages are found through the ``omni_rl.models`` entry point, which
imports ``omni_qwen25.adapters``; importing this package itself loads nothing heavy.
"""
