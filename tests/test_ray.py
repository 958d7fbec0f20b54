"""The Ray backend on CPU: one actor per agent gives the local backend's metrics, and a
killed actor is detected and the run resumes from its last checkpoint."""

import json
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")

from cory.logging import read_jsonl_rows  # noqa: E402
from cory.provenance import ENVIRONMENT_FILE  # noqa: E402
from cory.trainer import Trainer  # noqa: E402
from helpers.training import run_trainer as train  # noqa: E402

VOLATILE = ("time/", "memory/")


pytestmark = pytest.mark.usefixtures("ray_cluster")


def stable(rows):
    return [{k: v for k, v in r.items() if not any(part in k for part in VOLATILE)} for r in rows]


def cory_config(make_config, tmp_path, name, method="cory", **extra):
    if method == "refine":  # two rounds with difference credit: turns and counterfactuals on actors
        extra = {"collective__credit": "difference", **extra}
    return make_config(method=method, steps=6, threads=1, save_every=2, eval_every=3, roles__swap_every=2,
                       output_dir=str(tmp_path / name), **extra)


@pytest.mark.parametrize("method", ["cory", "refine"])
def test_ray_backend_matches_the_local_backend(make_config, tmp_path, method):
    import torch

    torch.set_num_threads(1)
    local = train(cory_config(make_config, tmp_path, "local", method))
    remote = train(cory_config(make_config, tmp_path, "ray", method, backend="ray", ray__num_cpus_per_agent=1))
    assert stable(local.rows) == stable(remote.rows)
    assert [r["pioneer/agent"] for r in remote.rows if "pioneer/agent" in r] == [0, 0, 1, 1, 0, 0]
    assert (Path(remote.config.output_dir) / "final" / "agent1" / "model.safetensors").exists()
    environment = json.loads((Path(remote.config.output_dir) / ENVIRONMENT_FILE).read_text().splitlines()[0])
    assert environment["devices"] == ["cpu", "cpu"]  # reported by the actors themselves


def test_a_killed_actor_is_replaced_and_the_run_resumes(make_config, tmp_path):
    import torch

    torch.set_num_threads(1)
    reference = train(cory_config(make_config, tmp_path, "reference"))
    config = cory_config(make_config, tmp_path, "killed", backend="ray", ray__num_cpus_per_agent=1)
    trainer = Trainer(config)
    original = trainer.run_iteration

    def kill_once(step):
        if step == 3 and trainer.agents.restarts == 0:
            ray.kill(trainer.agents.agents[1].actors[0], no_restart=True)
        return original(step)
    trainer.run_iteration = kill_once
    try:
        trainer.train()
    finally:
        trainer.close()
    assert trainer.agents.restarts == 1
    events = read_jsonl_rows(Path(config.output_dir) / "events.jsonl")
    assert any(e["event"] == "agent_lost" and e["step"] == 2 for e in events)
    assert stable(reference.rows) == stable(trainer.rows)
