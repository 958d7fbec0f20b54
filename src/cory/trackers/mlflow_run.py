"""MLflow: a run per training run in experiment ``log.project`` (resumed by run id).

The tracking URI is MLflow's own ``MLFLOW_TRACKING_URI``: a database such as
``sqlite:///mlflow.db`` (the extra installs what SQLite needs), a tracking server, or a
``file:`` store (MLflow 3 wants ``MLFLOW_ALLOW_FILE_STORE=true`` for that). MLflow's metric names may not contain ``@``: ``pass@k`` is logged as ``pass_at_k``.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

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


class MlflowRun:
    def __init__(self, config: dict[str, Any], run_name: str, project: str, tags: list[str],
                 state: dict[str, Any]) -> None:
        from mlflow.entities import Param, RunTag
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient()
        if "run_id" in state:
            self.run_id = state["run_id"]
            self.client.update_run(self.run_id, status="RUNNING")
            return
        experiment = self.client.get_experiment_by_name(project)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(project)
        run = self.client.create_run(experiment_id, run_name=run_name, tags={t: "" for t in tags})
        self.run_id = state["run_id"] = run.info.run_id
        params = [Param(k, v) for k, v in flatten(config).items()]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 parameters a batch
            self.client.log_batch(self.run_id, params=params[start:start + 100])
        self.client.log_batch(self.run_id, tags=[RunTag("cory.method", str(config.get("method")))])

    def log_metrics(self, step: int, row: dict[str, float]) -> None:
        from mlflow.entities import Metric

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
