"""The model kit's mixins against the contract kit (``omni_contracts.testing``) and the
contracts' error classes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from omni_contracts import ContractViolation, testing


def test_checkpoint_errors_are_user_errors() -> None:
    """A missing token id or chat template is the checkpoint's fault, not a bug: the trainer
    exits 2 with the message (it treats OmniContractError so), where a ValueError or a bare
    FileNotFoundError was a traceback."""
    from omni_contracts import CheckpointError, OmniContractError
    from omni_model_kit.chat_template import load_chat_template
    from omni_model_kit.thinker_processor import ThinkerProcessorMixin

    class Processor(ThinkerProcessorMixin):
        required_config_ids = ("image_token_id", "vision_start_token_id")

    with pytest.raises(CheckpointError, match=r"The thinker config lacks \['vision_start_token_id'\]") as info:
        Processor().bind_thinker_config(SimpleNamespace(image_token_id=1))
    assert isinstance(info.value, OmniContractError)
    with pytest.raises(FileNotFoundError) as missing:
        load_chat_template("/no/such/checkpoint")
    assert isinstance(missing.value, CheckpointError)


def test_logits_to_keep_check_catches_an_ignored_argument_and_a_hook_left_behind() -> None:
    import torch
    from torch import nn

    from omni_model_kit.thinker_policy import ThinkerPolicyMixin

    class Thinker(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.head = nn.Embedding(16, 4), nn.Linear(4, 16)

        def get_output_embeddings(self) -> nn.Module:
            return self.head

        def forward(self, input_ids: torch.Tensor, **kwargs: object) -> SimpleNamespace:
            return SimpleNamespace(logits=self.head(self.embed(input_ids).cumsum(1)))

    class Policy(ThinkerPolicyMixin, nn.Module):
        def __init__(self) -> None:
            nn.Module.__init__(self)  # the mixin's __init__ builds from a config; this thinker is ready
            self.thinker = Thinker()

    class Ignores(Policy):
        def forward(self, *args: object, logits_to_keep: int = 0, **kwargs: object) -> object:
            return self.thinker(*args, **kwargs)

    class Leaves(Policy):
        def forward(self, *args: object, logits_to_keep: int = 0, **kwargs: object) -> object:
            if logits_to_keep:
                head = self.thinker.get_output_embeddings()
                head.register_forward_pre_hook(lambda module, inputs: (inputs[0][:, -logits_to_keep:],))
            return self.thinker(*args, **kwargs)

    ids = torch.tensor([[1, 2, 3, 4, 5]])
    testing.check_logits_to_keep(Policy(), ids)
    with pytest.raises(ContractViolation, match=r"logits_to_keep=2 gave logits of shape \(1, 5, 16\)"):
        testing.check_logits_to_keep(Ignores(), ids)
    with pytest.raises(ContractViolation, match=r"a full forward gave \(1, 2, 16\)"):
        testing.check_logits_to_keep(Leaves(), ids)
