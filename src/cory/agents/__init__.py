"""Agents: a policy with everything it learns with (optimiser, KL controller, moments...)."""
