"""Exact resume: a run killed (SIGKILL) at a random iteration, or while writing a checkpoint,
and resumed, ends with the same metrics rows and bit-identical weights as an uninterrupted
run. Also: corrupted checkpoints are skipped, and a changed config is refused."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from cory.checkpoint import latest_good, step_dirs
from cory.config.schema import RunConfig
from cory.errors import ConfigError
from cory.logging import read_jsonl_rows

ROOT = Path(__file__).resolve().parents[1]
VOLATILE = ("time/", "memory/")

BASE = {
    "model": "tiny-random", "steps": 12, "seed": 3, "device": "cpu", "threads": 1,
    "eval_every": 4, "save_every": 3, "keep_last": 2,
    "task": {"name": "toy", "n_test": 4, "n_train": 40}, "generation": {"max_new_tokens": 6},
    "ppo": {"learning_rate": 1e-2, "batch_size": 8, "mini_batch_size": 4, "ppo_epochs": 2,
            "use_score_scaling": True, "adap_kl_ctrl": True},
    "eval": {"n_prompts": 4}, "log": {"tensorboard": False, "progress": False},
}


def write_config(tmp_path, method):
    config = {**BASE, "method": method}
    if method in ("cory", "refine"):
        config["roles"] = {"swap_every": 4}
    if method == "refine":  # two rounds, difference credit: every turn and counterfactual resumes
        config["collective"] = {"credit": "difference", "turn_discount": 0.5}
    if method == "elastic_reset":
        config["elastic_reset"] = {"enabled": True, "reset_freq": 5, "decay": 0.8}
    path = tmp_path / f"{method}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def command(config, out, *extra):
    return [sys.executable, "-m", "cory", "train", str(config), f"output_dir={out}", *extra]


def environment(**extra):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **extra}
    env.pop("CORY_CRASH_AT", None) if "CORY_CRASH_AT" not in extra else None
    return env


def run_to_end(config, out, *extra, env=None):
    result = subprocess.run(command(config, out, *extra), env=env or environment(), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]


def kill_after_rows(config, out, rows):
    """Start a run and SIGKILL it once ``rows`` metrics rows are written."""
    process = subprocess.Popen(command(config, out), env=environment(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None:
        if metrics.exists() and len(read_jsonl_rows(metrics)) >= rows:
            break
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()


def stable(rows):
    return [{k: v for k, v in r.items() if not any(part in k for part in VOLATILE)} for r in rows]


def assert_same_run(reference, resumed):
    assert stable(read_jsonl_rows(reference / "metrics.jsonl")) == stable(read_jsonl_rows(resumed / "metrics.jsonl"))
    for agent in sorted(p.name for p in (reference / "final").iterdir() if p.is_dir()):
        for name in ("model.safetensors", "value_head.safetensors"):
            a, b = load_file(reference / "final" / agent / name), load_file(resumed / "final" / agent / name)
            assert a.keys() == b.keys()
            for key in a:
                assert torch.equal(a[key], b[key]), (agent, name, key)


# PPO's own resume is proven by the checkpoint-write kill below and inside Elastic Reset's run.
@pytest.mark.parametrize("method", ["cory", "elastic_reset", "refine"])
def test_sigkill_at_a_random_iteration_then_resume_is_exact(tmp_path, method):
    config = write_config(tmp_path, method)
    run_to_end(config, tmp_path / "reference")
    killed = tmp_path / "killed"
    kill_after_rows(config, killed, random.Random(method).randint(4, 10))
    assert len(read_jsonl_rows(killed / "metrics.jsonl")) < 13, "the run should have been killed"
    run_to_end(config, killed, "resume=auto")
    assert_same_run(tmp_path / "reference", killed)


@pytest.mark.parametrize("method", ["ppo", "cory"])
def test_sigkill_while_writing_a_checkpoint_then_resume_is_exact(tmp_path, method):
    config = write_config(tmp_path, method)
    run_to_end(config, tmp_path / "reference")
    crashed = tmp_path / "crashed"
    result = subprocess.run(command(config, crashed), env=environment(CORY_CRASH_AT="checkpoint:6"),
                            capture_output=True, text=True)
    assert result.returncode == -signal.SIGKILL
    checkpoints = crashed / "checkpoints"
    assert [p.name for p in step_dirs(checkpoints)] == ["step-00000003"]
    assert any(p.name.startswith(".partial-00000006") for p in checkpoints.iterdir())
    run_to_end(config, crashed, "resume=auto")
    assert_same_run(tmp_path / "reference", crashed)


def test_a_corrupted_checkpoint_is_reported_and_the_previous_one_used(tmp_path, make_config):
    from cory.trainer import Trainer

    config = make_config(steps=6, save_every=2, keep_last=3, eval_every=0)
    trainer = Trainer(config)
    trainer.train()
    trainer.close()
    run = Path(config.output_dir)
    newest = step_dirs(run / "checkpoints")[-1]
    weights = newest / "agent0.safetensors"
    data = bytearray(weights.read_bytes())
    data[-10] ^= 0xFF
    weights.write_bytes(bytes(data))
    reports = []
    assert latest_good(run, report=reports.append) == step_dirs(run / "checkpoints")[-2]
    assert "fails its checksum" in reports[0]
    (step_dirs(run / "checkpoints")[-2] / "manifest.json").unlink()
    assert latest_good(run, report=reports.append) == step_dirs(run / "checkpoints")[-3]
    assert "no manifest.json" in reports[-1]


def test_resume_refuses_a_different_config_but_allows_more_steps(tmp_path, make_config):
    from cory.trainer import Trainer

    config = make_config(steps=2, save_every=1, eval_every=0)
    trainer = Trainer(config)
    trainer.train()
    trainer.close()
    changed = make_config(steps=4, save_every=1, eval_every=0, resume="auto", ppo__learning_rate=5e-3)
    with pytest.raises(ConfigError, match=r"ppo.learning_rate: 0.01 -> 0.005"):
        Trainer(changed).train()
    longer = make_config(steps=4, save_every=1, eval_every=0, resume="auto")
    trainer = Trainer(longer)
    trainer.train()
    trainer.close()
    assert [r["step"] for r in trainer.rows] == [0, 1, 2, 3, 4]
    # events count iterations from 0: checkpoint k follows iteration k - 1; the resume is an event
    events = [(e["step"], e["event"], e.get("checkpoint"))
              for e in read_jsonl_rows(Path(config.output_dir) / "events.jsonl")]
    assert events == [(0, "checkpoint", 1), (1, "checkpoint", 2), (2, "resumed", 2),
                      (2, "checkpoint", 3), (3, "checkpoint", 4)]
    # a key listed in allow_config_change may change, and so may the list itself
    threaded = dict(steps=5, save_every=1, eval_every=0, resume="auto", threads=torch.get_num_threads())
    with pytest.raises(ConfigError, match=rf"threads: None -> {torch.get_num_threads()}"):
        Trainer(make_config(**threaded)).train()
    allowed = [*RunConfig().allow_config_change, "threads"]
    trainer = Trainer(make_config(**threaded, allow_config_change=allowed))
    trainer.train()
    trainer.close()
    assert [r["step"] for r in trainer.rows] == [0, 1, 2, 3, 4, 5]
