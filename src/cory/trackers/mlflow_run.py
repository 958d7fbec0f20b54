"""MLflow: a run per training run in experiment ``log.project`` (resumed by run id).

The tracking URI is MLflow's own ``MLFLOW_TRACKING_URI``: a database such as
``sqlite:///mlflow.db`` (the extra installs what SQLite needs), a tracking server, or a
``file:`` store (MLflow 3 wants ``MLFLOW_ALLOW_FILE_STORE=true`` for that). The URI is
recorded, made absolute, in ``trackers.json``: a resume from another working folder finds the
same store. Requests give up after ``log.tracker_timeout`` seconds and one retry (unless
``MLFLOW_HTTP_REQUEST_TIMEOUT`` / ``_MAX_RETRIES`` say otherwise), so an unreachable server
costs seconds, not minutes. MLflow's metric names may not contain ``@``: ``pass@k`` is
logged as ``pass_at_k``. Tags ``key=value`` become tags with that value.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from cory.redaction import lacks_password, redact

PARAM_LIMIT = 6000  # MLflow's longest parameter value
INVALID = re.compile(r"[^\w\-. /:]")


def metric_name(key: str) -> str:
    """``key`` as MLflow accepts it."""
    return INVALID.sub("_", key.replace("@", "_at_"))


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = json.dumps(value)[:PARAM_LIMIT]
    return flat


def absolute_uri(uri: str) -> str:
    """``uri`` with a relative SQLite or file-store path made absolute (against this folder)."""
    for scheme in ("sqlite:///", "file:"):
        if uri.startswith(scheme):
            path = uri[len(scheme):]
            return uri if Path(path).is_absolute() else scheme + str(Path(path).resolve())
    if "://" not in uri:  # a bare folder: MLflow's file store
        return str(Path(uri).resolve())
    return uri


def tag_pairs(tags: list[str]) -> dict[str, str]:
    """``['imdb', 'team=nlp']`` -> ``{'imdb': 'true', 'team': 'nlp'}``."""
    return {key: (value if sep else "true") for key, sep, value in (t.partition("=") for t in tags)}


class MlflowRun:
    def __init__(self, config: dict[str, Any], run_name: str, project: str, tags: list[str],
                 state: dict[str, Any], timeout: float = 30.0) -> None:
        import mlflow  # optional: the [mlflow] extra
        from mlflow.entities import Param, RunTag  # optional: the [mlflow] extra
        from mlflow.tracking import MlflowClient  # optional: the [mlflow] extra

        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(1, round(timeout))))
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        # trackers.json keeps the store's URI without a password; a resumed run takes the
        # whole URI from its environment again when that is the same store.
        current = absolute_uri(mlflow.get_tracking_uri())
        stored = state.setdefault("tracking_uri", redact(current))
        uri = current if redact(current) == stored else stored
        if lacks_password(uri):
            raise RuntimeError(f"the run's MLflow store {uri} needs its password: set MLFLOW_TRACKING_URI "
                               "to the whole URI again")
        self.client = MlflowClient(tracking_uri=uri)
        if "run_id" in state:
            self.run_id = state["run_id"]
            self.client.update_run(self.run_id, status="RUNNING")
            return
        experiment = self.client.get_experiment_by_name(project)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(project)
        run = self.client.create_run(experiment_id, run_name=run_name, tags=tag_pairs(tags))
        self.run_id = state["run_id"] = run.info.run_id
        params = [Param(k, v) for k, v in flatten(config).items()]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 parameters a batch
            self.client.log_batch(self.run_id, params=params[start:start + 100])
        self.client.log_batch(self.run_id, tags=[RunTag("cory.method", str(config.get("method")))])

    def held_step(self) -> int | None:
        return None  # log_batch returns once the store has the values

    def log_model(self, folder: Path) -> bool:
        self.client.log_artifacts(self.run_id, str(folder), artifact_path="model")
        return True

    def log_metrics(self, step: int, row: dict[str, float]) -> None:
        from mlflow.entities import Metric  # optional: the [mlflow] extra

        now = int(time.time() * 1000)
        metrics = [Metric(metric_name(k), v, now, step) for k, v in row.items()]
        for start in range(0, len(metrics), 1000):  # MLflow's batch limit
            self.client.log_batch(self.run_id, metrics=metrics[start:start + 1000])

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        columns = list(dict.fromkeys(k for row in rows for k in row))
        self.client.log_table(self.run_id, data={c: [row.get(c) for row in rows] for c in columns},
                              artifact_file=f"samples/step-{step:06d}.json")

    def close(self) -> None:
        self.client.set_terminated(self.run_id)
