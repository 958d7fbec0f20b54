"""Scaling out: the Ray backend (one actor per agent) behind the trainer's agent interface."""
