"""Shared fixtures: tiny configs that run the whole loop in seconds, offline."""

from __future__ import annotations

import os

import pytest
import torch

from cory.config.loading import resolve

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def tiny_config(tmp_path, **overrides):
    """A run config for the toy task with the tiny random model."""
    raw = {
        "model": "tiny-random",
        "steps": 3,
        "seed": 0,
        "output_dir": str(tmp_path / "run"),
        "device": "cpu",
        "eval_every": 2,
        "task": {"name": "toy", "n_test": 8, "n_train": 64},
        "generation": {"max_new_tokens": 6},
        "ppo": {"learning_rate": 1e-2, "batch_size": 8, "mini_batch_size": 4, "ppo_epochs": 2,
                "init_kl_coef": 0.01, "adap_kl_ctrl": False},
        "eval": {"n_prompts": 8},
        "log": {"tensorboard": False, "progress": False, "n_samples": 2},
    }
    for dotted, value in overrides.items():
        node = raw
        parts = dotted.split("__")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return resolve(raw)


@pytest.fixture
def make_config(tmp_path):
    return lambda **overrides: tiny_config(tmp_path, **overrides)


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster of 2 CPUs for the module's tests (the Ray backend, sharding)."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()
