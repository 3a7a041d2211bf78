"""Implementation shared by omni-rl's model packages (the contracts are ``omni_contracts``).

What two model packages would otherwise each write again, parametrised by what differs:

- :mod:`omni_model_kit.thinker_adapter`: the training adapter of an Omni checkpoint's thinker;
- :mod:`omni_model_kit.thinker_policy`: the mixin of the class that builds the thinker alone;
- :mod:`omni_model_kit.thinker_processor`: the processor pieces the engines call by name;
- :mod:`omni_model_kit.rollout_adapter`: a thinker -> talker -> vocoder rollout adapter;
- :mod:`omni_model_kit.chat_template`: the chat template shipped beside a tokenizer;
- :mod:`omni_model_kit.tiny`: offline tiny checkpoints (cache, BPE, tokenizer, processor, CLI).

Model packages import it; ``omni_contracts`` and the components never do (``.importlinter``).
Importing it loads no torch and no transformers: each module imports them where it uses them.
"""
