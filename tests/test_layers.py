"""The folders name the layers: ``config/`` turns text into a validated config, ``multi/``
owns the episode, and the analysis half of ``experiments/`` reads files without torch (a
suite's tables, plots and screen run on a laptop without the training stack)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[1] / "src" / "cory" / "experiments"
RUN_MODELS = {"running", "probe"}  # these two train or generate; every other module only reads


def analysis_modules() -> list[str]:
    return sorted(p.stem for p in EXPERIMENTS.glob("*.py") if p.stem != "__init__" and p.stem not in RUN_MODELS)


def loads_torch(module: str) -> bool:
    code = f"import sys, {module}; print('torch' in sys.modules)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "True"


def test_the_analysis_modules_are_the_expected_ones():
    assert analysis_modules() == ["confirmation", "diagnostics", "plots", "report", "results", "reward_quantities",
                                  "screen", "stats", "suites"]


@pytest.mark.parametrize("module", analysis_modules())
def test_an_analysis_module_imports_no_torch(module):
    assert not loads_torch(f"cory.experiments.{module}")


def test_the_check_sees_torch_where_it_is_loaded():
    assert loads_torch("cory.experiments.probe")
