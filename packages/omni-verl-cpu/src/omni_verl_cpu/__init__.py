"""verl on the CPU: the extensions verl needs to run its own trainer on this machine's CPU.

- :mod:`omni_verl_cpu.platform`: the ``cpu`` device platform, in verl's platform registry
  (``VERL_PLATFORM=cpu`` picks it in every process);
- :mod:`omni_verl_cpu.rollout`: the ``omni_local`` rollout backend, a replica whose server
  samples with omni-rollout's local engine (and speaks, for a talker: :mod:`omni_verl_cpu.speech`);
- :mod:`omni_verl_cpu.gloo_checkpoint`: the ``omni_gloo`` weight-sync backend of a rollout on
  ranks of its own, in verl's checkpoint-engine registry.

verl loads each of them by name in its own processes; a run on GPUs never imports them.
This module holds only the names a launcher writes into verl's config (light: no verl,
torch or Ray import). What the rollout serves is :class:`omni_verl_cpu.policy.CpuPolicy`.
"""

PLATFORM = "cpu"
"""The name :mod:`omni_verl_cpu.platform` registers in verl's platform registry (``VERL_PLATFORM``)."""
ROLLOUT_NAME = "omni_local"
"""``actor_rollout_ref.rollout.name`` of the CPU rollout (:mod:`omni_verl_cpu.rollout`)."""
WORKER_ROLLOUT = "omni_verl_cpu.rollout.LocalRolloutWorkerAdapter"
"""The worker-side half of the CPU rollout, for verl's worker rollout registry."""
GLOO_BACKEND = "omni_gloo"
"""``actor_rollout_ref.rollout.checkpoint_engine.backend`` of a separated rollout on the CPU."""
GLOO_BACKEND_MODULE = "omni_verl_cpu.gloo_checkpoint"
"""``checkpoint_engine.custom_backend_module``: verl imports it, which registers :data:`GLOO_BACKEND`."""
