"""Experiment trackers against the real libraries, offline: wandb (offline mode, its run file
read back), MLflow (a SQLite store, read back with MlflowClient), Trackio (its local SQLite
database). Runs go through the real CLI in a subprocess, as a user would start them."""

from __future__ import annotations

import glob
import json
import socket
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cory.errors import ConfigError
from cory.trackers import check_installed

CONFIG = {
    "model": "tiny-random", "method": "cory", "steps": 3, "seed": 0, "device": "cpu", "eval_every": 2,
    "task": {"name": "toy", "n_test": 8, "n_train": 64}, "generation": {"max_new_tokens": 6},
    "ppo": {"learning_rate": 1e-2, "batch_size": 8, "mini_batch_size": 4, "ppo_epochs": 1},
    "eval": {"n_prompts": 8}, "log": {"progress": False, "n_samples": 2, "project": "trackers-test"},
}


def train(tmp_path: Path, env: dict[str, str], *overrides: str) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    run = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "cory", "train", str(config), f"output_dir={run}", *overrides],
                            capture_output=True, text=True, timeout=600, cwd=tmp_path,
                            env={**_base_env(), "WANDB_MODE": "offline", "WANDB_SILENT": "true", **env})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return run


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_", "TRACKIO_"))}


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def expected(run: Path, key: str) -> dict[int, float]:
    return {row["step"]: row[key] for row in jsonl(run / "metrics.jsonl") if key in row}


def wandb_history(run: Path) -> list[dict[str, str]]:
    """History rows of the offline run file (W&B's record log: 32 KiB blocks of records with
    a 7-byte header each, payloads protobuf ``Record``s)."""
    from wandb.proto import wandb_internal_pb2

    data = Path(glob.glob(str(run / "wandb" / "offline-run-*" / "run-*.wandb"))[0]).read_bytes()
    position, records, pending = 7, [], b""
    while position + 7 <= len(data):
        if 32768 - position % 32768 < 7:
            position += 32768 - position % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        chunk = data[position + 7:position + 7 + length]
        position += 7 + length
        if kind == 0:
            break
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            records.append(pending)
    history = []
    for raw in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            history.append({item.key or "/".join(item.nested_key): item.value_json for item in record.history.item})
    return history


def test_every_tracker_receives_every_metric_under_the_same_names(tmp_path):
    database = tmp_path / "mlflow.db"
    run = train(tmp_path, {"MLFLOW_TRACKING_URI": f"sqlite:///{database}", "TRACKIO_DIR": str(tmp_path / "trackio")},
                "log.report_to=[tensorboard, wandb, mlflow, trackio]")
    rewards, kls = expected(run, "task_reward"), expected(run, "agent1/kl")
    assert len(rewards) == 3 and not [e for e in jsonl(run / "events.jsonl") if e["event"] == "tracker_failed"]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{database}")
    experiment = client.get_experiment_by_name("trackers-test")
    (mlflow_run,) = client.search_runs([experiment.experiment_id])
    history = {m.step: m.value for m in client.get_metric_history(mlflow_run.info.run_id, "task_reward")}
    assert history == pytest.approx(rewards)
    assert {m.step: m.value for m in client.get_metric_history(mlflow_run.info.run_id, "agent1/kl")} == pytest.approx(kls)
    assert mlflow_run.data.params["method"] == '"cory"' and mlflow_run.data.params["ppo.batch_size"] == "8"
    assert "cory" in mlflow_run.data.tags and mlflow_run.info.status == "FINISHED"
    assert [a.path for a in client.list_artifacts(mlflow_run.info.run_id, "samples")]

    wandb_rows = [row for row in wandb_history(run) if "task_reward" in row]
    assert {int(r["_step"]): float(r["task_reward"]) for r in wandb_rows} == pytest.approx(rewards)
    assert any(row.get("samples/_type") == "\"table-file\"" for row in wandb_history(run))

    database = tmp_path / "trackio" / "trackers-test.db"
    rows = sqlite3.connect(database).execute("select step, metrics from metrics").fetchall()
    logged = {step: json.loads(metrics)["task_reward"] for step, metrics in rows if "task_reward" in json.loads(metrics)}
    assert logged == pytest.approx(rewards)
    assert (run / "tensorboard").is_dir()


def test_a_resumed_run_continues_the_same_tracker_run_without_repeating_steps(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = train(tmp_path, {"MLFLOW_TRACKING_URI": uri}, "log.report_to=[mlflow]", "save_every=1", "keep_last=3")
    checkpoint = run / "checkpoints" / "step-00000001"
    assert checkpoint.is_dir()
    train(tmp_path, {"MLFLOW_TRACKING_URI": uri}, "log.report_to=[mlflow]", "save_every=1", "keep_last=3",
          f"resume={checkpoint}")  # steps 1 and 2 run again, exactly as before
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    (mlflow_run,) = client.search_runs([client.get_experiment_by_name("trackers-test").experiment_id])
    history = client.get_metric_history(mlflow_run.info.run_id, "task_reward")
    assert sorted(m.step for m in history) == [0, 1, 2]  # each step once
    assert {m.step: m.value for m in history} == pytest.approx(expected(run, "task_reward"))


def test_a_failing_tracker_is_switched_off_and_the_run_finishes(tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    run = train(tmp_path, {"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{port}", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
                           "MLFLOW_HTTP_REQUEST_TIMEOUT": "2"}, "log.report_to=[mlflow]")
    failures = [e for e in jsonl(run / "events.jsonl") if e["event"] == "tracker_failed"]
    assert len(failures) == 1 and failures[0]["tracker"] == "mlflow"
    assert len(expected(run, "task_reward")) == 3 and (run / "final" / "summary.json").exists()


def test_unknown_or_missing_trackers_are_config_errors_naming_the_fix(monkeypatch):
    with pytest.raises(ConfigError, match="log.report_to: unknown tracker 'comet'"):
        check_installed(["comet"])
    import cory.trackers as trackers

    real = trackers.importlib.util.find_spec
    monkeypatch.setattr(trackers.importlib.util, "find_spec", lambda name: None if name == "wandb" else real(name))
    with pytest.raises(ConfigError, match=r"'wandb' is not installed; pip install 'cory\[wandb\]'"):
        check_installed(["tensorboard", "wandb"])
