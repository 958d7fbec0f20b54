"""Rollout engines an agent can sample with besides its own decode loop (``generation.engine``)."""
