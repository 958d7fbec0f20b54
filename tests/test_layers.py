"""The folders name the layers: ``config/`` turns text into a validated config, ``multi/``
owns the episode, and the analysis half of ``experiments/`` reads files without torch (a
suite's tables, plots and screen run on a laptop without the training stack)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXPERIMENTS = Path(__file__).resolve().parents[1] / "src" / "cory" / "experiments"
RUN_MODELS = {"running", "probe"}  # these two train or generate; every other module only reads
# One fresh interpreter imports each module in turn and says which first brought torch in.
PROBE = """
import importlib, json, sys
found = {}
for name in sys.argv[1:]:
    importlib.import_module(name)
    found[name] = "torch" in sys.modules
print(json.dumps(found))
"""


def analysis_modules() -> list[str]:
    return sorted(p.stem for p in EXPERIMENTS.glob("*.py") if p.stem != "__init__" and p.stem not in RUN_MODELS)


def torch_after_each(modules: list[str]) -> dict[str, bool]:
    """For each module, imported in order in one fresh interpreter: whether torch is loaded after it."""
    done = subprocess.run([sys.executable, "-c", PROBE, *modules], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_the_analysis_modules_of_experiments_import_no_torch():
    assert analysis_modules() == ["confirmation", "diagnostics", "plots", "report", "results", "reward_quantities",
                                  "screen", "stats", "suites"]
    modules = [f"cory.experiments.{name}" for name in analysis_modules()]
    assert torch_after_each(modules) == dict.fromkeys(modules, False)


def test_the_check_sees_torch_where_it_is_loaded():
    assert torch_after_each(["cory.experiments.stats", "cory.experiments.probe"]) == {
        "cory.experiments.stats": False, "cory.experiments.probe": True}
