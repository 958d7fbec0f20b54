"""Environments an agent acts in over several turns: the protocol (``base``), the built-in
calculator and grid-planning environments, and the adapter for environments written for
TRL's ``GRPOTrainer(environment_factory=...)`` (a class whose public methods are tools)."""
