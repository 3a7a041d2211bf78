"""The omni-rl trainer application: the only place that wires the packages together."""
