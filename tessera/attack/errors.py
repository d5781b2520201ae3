"""Errors of the attack suite (under the ``tessera`` exception root)."""

from __future__ import annotations

from tessera.errors import TesseraError


class AttackError(TesseraError):
    """Root of the attack suite's errors."""


class UnknownScenarioError(AttackError):
    """A scenario name is not registered."""


class ModelInputError(AttackError):
    """An argument of the economics model is out of range."""
