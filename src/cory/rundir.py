"""The run folder: create or resume it, check a resumed config, restore the logs, export
the final models. The trainer calls these; they hold no training logic."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

from cory.agents.group import AgentGroup, export_agents
from cory.checkpoint import Checkpoint, checkpoints_dir, latest_good, load_checkpoint, step_dirs, writing_into
from cory.config.schema import RunConfig, config_to_yaml
from cory.config.tree import to_dict
from cory.errors import ConfigError
from cory.logging import EVENTS_FILE, METRICS_FILE, SAMPLES_FILE, write_jsonl_atomic
from cory.provenance import ENVIRONMENT_FILE
from cory.redaction import redacted
from cory.trackers import STATE_FILE as TRACKER_STATE

LOG_FILES = (METRICS_FILE, SAMPLES_FILE, EVENTS_FILE)


def config_differences(old: dict[str, Any], new: dict[str, Any], allowed: list[str],
                       prefix: str = "") -> list[str]:
    """Dotted keys whose values differ, except those under an allowed top-level key."""
    differences = []
    for key in sorted(set(old) | set(new)):
        dotted = f"{prefix}{key}"
        if not prefix and key in allowed:
            continue
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            differences += config_differences(a, b, allowed, dotted + ".")
        elif a != b:
            differences.append(f"{dotted}: {a!r} -> {b!r}")
    return differences


def open_run_dir(run_dir: Path, config: RunConfig) -> Checkpoint | None:
    """Make ``run_dir`` ready: the checkpoint to resume from, or None for a fresh start
    (then old logs are cleared and ``config.yaml`` written)."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / f".write-test-{uuid.uuid4().hex}"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise ConfigError(f"output_dir: cannot write to '{run_dir}' ({error.strerror}); "
                          "choose a writable folder") from None
    checkpoint = find_checkpoint(run_dir, config.resume)
    if checkpoint is not None:
        return checkpoint
    if config.resume is None and holds_results(run_dir):
        raise ConfigError(f"output_dir: '{run_dir}' already holds a run; pass resume=auto "
                          "to continue it, or choose another output_dir")
    if config.resume is None and (run_dir / "config.yaml").exists():
        print(f"{run_dir}: the run there stopped before its first iteration ended (no metrics row, no "
              "checkpoint, no final model); starting it afresh in the same folder")
    for name in (*LOG_FILES, TRACKER_STATE, ENVIRONMENT_FILE):
        (run_dir / name).unlink(missing_ok=True)
    shutil.rmtree(run_dir / "tensorboard", ignore_errors=True)
    (run_dir / "config.yaml").write_text(config_to_yaml(config), encoding="utf-8")
    return None


def holds_results(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds something a fresh start would destroy: a metrics row, a
    checkpoint or a final model (a run that failed before its first iteration ended has none)."""
    metrics = run_dir / METRICS_FILE
    has_rows = metrics.exists() and bool(metrics.read_text(encoding="utf-8").strip())
    return has_rows or (run_dir / "final").exists() or bool(step_dirs(checkpoints_dir(run_dir)))


def find_checkpoint(run_dir: Path, resume: str | None) -> Checkpoint | None:
    if resume is None:
        return None
    if resume == "auto":
        path = latest_good(run_dir, report=print)
        return load_checkpoint(path) if path is not None else None
    return load_checkpoint(Path(resume))


def check_resumable(checkpoint: Checkpoint, config: RunConfig) -> None:
    """Refuse to resume under a config that differs outside ``allow_config_change`` (which may
    itself always change: it governs this check, not the run)."""
    allowed = [*config.allow_config_change, "allow_config_change"]
    differences = config_differences(checkpoint.state["config"], redacted(to_dict(config)), allowed)
    if differences:
        raise ConfigError(
            "resume: the checkpoint was written by a different config; these keys differ:\n  "
            + "\n  ".join(differences)
            + "\nKeys listed in allow_config_change may differ (default: steps, eval_every, "
            "save_every, keep_last, log, resume, output_dir); add a key there to change it, e.g. "
            "allow_config_change=[steps,eval_every,save_every,keep_last,log,resume,output_dir,threads].")


def restore_logs(run_dir: Path, checkpoint: Checkpoint) -> None:
    """The logs as they were when the checkpoint was written (later rows are recomputed)."""
    for name in LOG_FILES:
        rows = [json.loads(line) for line in checkpoint.texts.get(name, "").splitlines() if line]
        write_jsonl_atomic(run_dir / name, rows)


def log_texts(run_dir: Path, config: RunConfig) -> dict[str, str]:
    """The text files a checkpoint carries: the logs so far and the config."""
    texts = {name: (run_dir / name).read_text(encoding="utf-8") for name in LOG_FILES if (run_dir / name).exists()}
    texts["config.yaml"] = config_to_yaml(config)
    return texts


def export_final(run_dir: Path, agents: AgentGroup, final: dict[str, Any]) -> Path:
    """``final/``: every agent as a Hugging Face folder plus the final metrics, written
    into a scratch folder and renamed, so a crash never leaves half of it."""
    target = run_dir / "final"
    scratch = run_dir / f".final-{uuid.uuid4().hex}"
    with writing_into(scratch, "the final model(s)"):
        export_agents(agents, scratch)
        (scratch / "summary.json").write_text(json.dumps(final, indent=1), encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    scratch.rename(target)
    return target
