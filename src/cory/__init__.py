"""cory: multi-agent RL fine-tuning of language models (CORY, NeurIPS 2024) and its baselines."""

__version__ = "0.1.0"
