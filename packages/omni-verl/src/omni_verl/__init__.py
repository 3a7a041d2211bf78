"""omni-rl's extension of verl: what verl's own processes import to train an omni model.

verl imports :mod:`omni_verl.external` in every process (``VERL_USE_EXTERNAL_MODULES``),
which registers the rest through verl's extension points:

- :mod:`omni_verl.engine`: the FSDP training engine of ``model_type=omni_language_model``;
- :mod:`omni_verl.trainer`: the ``omni_sync`` trainer; :mod:`omni_verl.fully_async` verl's
  fully-async trainer with these pieces;
- :mod:`omni_verl.rollout`: the ``vllm_omni`` rollout replica (vLLM-Omni's server);
- :mod:`omni_verl.agent_loop`: the agent-loop manager and workers (the adapter's processor,
  a speech stage's loop, the reward-failure checks);
- :mod:`omni_verl.dataset` and :mod:`omni_verl.reward`: the dataset class and the reward
  function verl loads from config paths.

:mod:`omni_verl.settings` holds the names a launcher writes into verl's config and the run's
settings carried to every process (light: no verl import). The CPU plugin
(:mod:`omni_verl_cpu`) is a package of its own; this one names it and loads it only on a CPU
run. Neither imports the app.
"""
