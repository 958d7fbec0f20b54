"""Experiment trackers against the real libraries, offline: wandb (offline mode, its run file
read back), MLflow (a SQLite store, read back with MlflowClient), Trackio (its local SQLite
database). Runs go through the real CLI in a subprocess, as a user would start them."""

from __future__ import annotations

import glob
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
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
    return train_logged(tmp_path, env, *overrides)[0]


def command(tmp_path: Path, *overrides: str) -> list[str]:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    return [sys.executable, "-m", "cory", "train", str(config), f"output_dir={tmp_path / 'run'}", *overrides]


def environment(env: dict[str, str]) -> dict[str, str]:
    return {**_base_env(), "WANDB_MODE": "offline", "WANDB_SILENT": "true", **env}


def train_logged(tmp_path: Path, env: dict[str, str], *overrides: str) -> tuple[Path, str]:
    """Train through the CLI; the run folder and what the run printed."""
    result = subprocess.run(command(tmp_path, *overrides), capture_output=True, text=True, timeout=600,
                            cwd=tmp_path, env=environment(env))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return tmp_path / "run", result.stdout + result.stderr


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_", "TRACKIO_"))}


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def expected(run: Path, key: str) -> dict[int, float]:
    return {row["step"]: row[key] for row in jsonl(run / "metrics.jsonl") if key in row}


def wandb_history(run: Path) -> list[dict[str, str]]:
    """History rows of every offline run file of the run (oldest first)."""
    from cory.trackers.wandb_records import history

    return [row for path in sorted(glob.glob(str(run / "wandb" / "offline-run-*" / "run-*.wandb")))
            for row in history(Path(path))]


def wandb_artifact_types(run: Path) -> list[str]:
    from wandb.proto import wandb_internal_pb2

    from cory.trackers.wandb_records import records

    types = []
    for path in glob.glob(str(run / "wandb" / "offline-run-*" / "run-*.wandb")):
        for raw in records(Path(path)):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(raw)
            if record.WhichOneof("record_type") == "artifact":
                types.append(record.artifact.type)
    return types


def test_every_tracker_receives_every_metric_under_the_same_names(tmp_path):
    database = tmp_path / "mlflow.db"
    run = train(tmp_path, {"MLFLOW_TRACKING_URI": f"sqlite:///{database}", "TRACKIO_DIR": str(tmp_path / "trackio")},
                "log.report_to=all", "log.tags=[imdb, team=nlp]", "log.log_model=true")
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
    assert mlflow_run.data.tags["cory"] == "true" and mlflow_run.data.tags["team"] == "nlp"
    assert mlflow_run.info.status == "FINISHED"
    assert [a.path for a in client.list_artifacts(mlflow_run.info.run_id, "model")] == ["model/agent0", "model/agent1",
                                                                                    "model/summary.json"]
    assert [a.path for a in client.list_artifacts(mlflow_run.info.run_id, "samples")]

    wandb_rows = [row for row in wandb_history(run) if "task_reward" in row]
    assert {int(r["_step"]): float(r["task_reward"]) for r in wandb_rows} == pytest.approx(rewards)
    assert any(row.get("samples/_type") == "\"table-file\"" for row in wandb_history(run))
    assert wandb_artifact_types(run).count("model") == 1  # beside the sample tables

    database = tmp_path / "trackio" / "trackers-test.db"
    rows = sqlite3.connect(database).execute("select step, metrics from metrics").fetchall()
    logged = {step: json.loads(metrics)["task_reward"] for step, metrics in rows if "task_reward" in json.loads(metrics)}
    assert logged == pytest.approx(rewards)
    (config_text,) = sqlite3.connect(database).execute("select config from configs").fetchone()
    assert json.loads(config_text)["tags"] == ["imdb", "team=nlp", "cory"]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    assert [e.value for e in events.Scalars("task_reward")] == pytest.approx(list(rewards.values()))
    assert "config/text_summary" in events.Tags()["tensors"] and "_hparams_/experiment" in events.summary_metadata


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


def test_mlflow_resumes_into_the_recorded_store_from_another_working_folder(tmp_path):
    relative = {"MLFLOW_TRACKING_URI": "sqlite:///mlflow.db"}  # MLflow resolves it against the working folder
    run = train(tmp_path, relative, "log.report_to=mlflow", "save_every=1", "keep_last=3")
    state = json.loads((run / "trackers.json").read_text())["mlflow"]
    assert state["tracking_uri"] == f"sqlite:///{tmp_path / 'mlflow.db'}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = subprocess.run(command(tmp_path, "log.report_to=mlflow", "save_every=1", "keep_last=3", "steps=4",
                                    "resume=auto"),
                            capture_output=True, text=True, timeout=600, cwd=elsewhere, env=environment(relative))
    assert result.returncode == 0, result.stderr[-3000:]
    assert not (elsewhere / "mlflow.db").exists()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(state["tracking_uri"])
    assert sorted(m.step for m in client.get_metric_history(state["run_id"], "task_reward")) == [0, 1, 2]
    # the longer run's final evaluation reached the same MLflow run (its iteration 3 shares the
    # old final evaluation's step: the documented exception)
    assert 4 in {m.step for m in client.get_metric_history(state["run_id"], "eval/task_reward")}


def test_a_failing_tracker_is_switched_off_out_loud_within_its_timeout_and_the_run_finishes(tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    run, printed = train_logged(tmp_path, {"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{port}"},
                                "log.report_to=mlflow", "log.tracker_timeout=2")
    assert time.monotonic() - started < 120  # MLflow's own defaults retry for ~4 minutes
    failures = [e for e in jsonl(run / "events.jsonl") if e["event"] == "tracker_failed"]
    assert len(failures) == 1 and failures[0]["tracker"] == "mlflow"
    assert "warning: tracker 'mlflow' switched off" in printed
    assert "tracker mlflow: switched off" in printed  # the end-of-run summary says it again
    assert len(expected(run, "task_reward")) == 3 and (run / "final" / "summary.json").exists()


def test_wandb_in_a_folder_it_cannot_write_is_switched_off_out_loud(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "wandb").write_text("a file where wandb wants a folder")
    run, printed = train_logged(tmp_path, {}, "log.report_to=[wandb]")
    assert "warning: tracker 'wandb' switched off" in printed and (run / "final" / "summary.json").exists()


def test_a_killed_run_resumes_without_holes_in_any_tracker(tmp_path):
    """SIGKILL mid-run, then resume: each tracker holds every step exactly once, although
    wandb and trackio had not written the last rows they were handed before the kill."""
    env = environment({"TRACKIO_DIR": str(tmp_path / "trackio")})
    overrides = ("log.report_to=[wandb, trackio, tensorboard]", "steps=8", "save_every=2", "keep_last=2", "eval_every=4")
    process = subprocess.Popen(command(tmp_path, *overrides), cwd=tmp_path, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (not metrics.exists() or len(metrics.read_text().splitlines()) < 5):
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    run = train(tmp_path, {"TRACKIO_DIR": str(tmp_path / "trackio")}, *overrides, "resume=auto")
    steps = sorted(expected(run, "memory/rss_gb"))
    assert steps == list(range(8))
    wandb_steps = [int(row["_step"]) for row in wandb_history(run) if "memory/rss_gb" in row]
    assert sorted(wandb_steps) == steps  # every step, once, across both sessions' offline files
    rows = sqlite3.connect(tmp_path / "trackio" / "trackers-test.db").execute("select step, metrics from metrics")
    trackio_steps = [step for step, values in rows if "memory/rss_gb" in json.loads(values)]
    assert sorted(trackio_steps) == steps


def test_report_to_takes_one_name_or_all_as_trl_does():
    from cory.config.loading import load_config
    from cory.trackers import installed_trackers

    assert load_config(None, ["log.report_to=wandb"]).log.trackers() == ["wandb"]
    assert load_config(None, ["log.report_to=all"]).log.trackers() == installed_trackers()
    assert installed_trackers() == ["tensorboard", "wandb", "mlflow", "trackio"]  # the test extra has them all
    assert load_config(None, ["log.report_to=all", "log.tensorboard=false"]).log.trackers()[0] == "wandb"


def test_unknown_or_missing_trackers_are_config_errors_naming_the_fix(monkeypatch):
    with pytest.raises(ConfigError, match="log.report_to: unknown tracker 'comet'"):
        check_installed(["comet"])
    import cory.trackers as trackers

    real = trackers.importlib.util.find_spec
    monkeypatch.setattr(trackers.importlib.util, "find_spec", lambda name: None if name == "wandb" else real(name))
    with pytest.raises(ConfigError, match=r"'wandb' is not installed; pip install 'cory\[wandb\]'"):
        check_installed(["tensorboard", "wandb"])


def test_a_tracker_server_that_accepts_and_never_answers_costs_one_timeout_and_keeps_no_password(tmp_path, monkeypatch):
    from cory.trackers import TrackerSet

    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        for key in [k for k in os.environ if k.startswith("MLFLOW_")]:
            monkeypatch.delenv(key)
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://mary:Tr4ckPW@127.0.0.1:{silent.getsockname()[1]}")
        failures: list[tuple[str, str]] = []
        started = time.monotonic()
        trackers = TrackerSet(["mlflow"], tmp_path, {"method": "ppo"}, "run", "project", [],
                              on_failure=lambda name, error: failures.append((name, error)), timeout=2.0)
        elapsed = time.monotonic() - started
    assert 2.0 <= elapsed < 3.0  # one log.tracker_timeout, not one per request or retry
    assert failures == [("mlflow", "TimeoutError: no answer within log.tracker_timeout (2 s)")]
    assert not trackers.active and "mlflow: switched off" in trackers.summary()[0]
    kept = (tmp_path / "trackers.json").read_text()  # the store's URI, without its password
    assert "Tr4ckPW" not in kept and "mary:***@127.0.0.1" in kept
