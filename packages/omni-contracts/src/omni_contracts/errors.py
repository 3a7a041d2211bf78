"""Exceptions raised by the contracts.

Every message says what was wrong and what to do about it; tests check the text.
"""

from __future__ import annotations


class OmniContractError(Exception):
    """Base class for every error omni_contracts raises."""


class RegistrationError(OmniContractError):
    """An adapter class cannot be registered (abstract, bad key, or a duplicate key)."""


class UnknownNameError(OmniContractError, LookupError, ValueError):
    """A registry has nothing under the name looked up (losses, estimators, agent loops)."""


class AdapterNotFoundError(OmniContractError, LookupError):
    """No adapter is registered under the requested key."""


class ModelPackageImportError(OmniContractError, ImportError):
    """An installed model package (entry point ``omni_rl.models``) failed to import."""


class UnknownModeError(OmniContractError, ValueError):
    """A rollout adapter was asked for a pipeline mode it does not support."""


class SchemaError(OmniContractError, ValueError):
    """A schema object (stage topology, rollout sample, field spec) is malformed."""


class ExtraFieldError(SchemaError):
    """Model-native extra fields are missing, undeclared, or have the wrong shape."""


class CheckpointError(OmniContractError, ValueError):
    """A checkpoint directory lacks something its model package needs (a token id in
    ``config.json``, a file); the message names it and how to fix it."""


class CheckpointFileNotFoundError(CheckpointError, FileNotFoundError):
    """A file the checkpoint must ship (its chat template, say) is not in its directory."""


class ContractViolation(AssertionError):
    """An adapter does not obey the contract (raised by ``omni_contracts.testing``).

    A subclass of ``AssertionError`` so pytest reports it as a test failure.
    """
