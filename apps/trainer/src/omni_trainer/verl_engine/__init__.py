"""The verl engine (``trainer.engine=verl``): our config, adapters, rewards and dataset
plugged into verl 0.9.1's extension points, run on Ray with vLLM-Omni rollout.

Nothing here imports verl, Ray or vLLM at module import except the modules verl itself
loads inside its processes (``external``, ``engine``, ``rollout``, ``agent_loop``); the CLI
reaches this package only when ``trainer.engine=verl``. Entry point: :func:`launch.run`.
"""
