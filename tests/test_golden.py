"""Golden metrics: fixed-seed tiny runs of every method family must reproduce the recorded
``metrics.jsonl`` rows. A refactor that claims "no behaviour change" proves it here.

    python tests/test_golden.py --record     # rewrite this CPU kind's files (only on purpose)

One set of files per CPU kind (``golden/GenuineIntel``, ``golden/GenuineIntel-amx``,
``golden/AuthenticAMD``): MKL takes other code paths on AMD and on Intel CPUs with AMX tiles
(Sapphire Rapids and later), the logits differ in the 7th digit, and a sampled token that
flips sends a run elsewhere, so no tolerance makes one set fit all. The GenuineIntel and
AuthenticAMD sets were recorded from commit f32705d's behaviour, the GenuineIntel-amx set
from commit 88b7338 (the same behaviour: those goldens passed on every commit between).

Timings and memory are left out; numbers must agree to 1e-6 relative (bit-identical on the
machine that recorded them; the tolerance absorbs another model of the same vendor's CPUs).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest



def cpu_kind() -> str:
    """``vendor_id`` of /proc/cpuinfo (e.g. GenuineIntel, AuthenticAMD), with ``-amx`` where
    the CPU has AMX tiles; 'unknown' elsewhere."""
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "unknown"
    vendor = next((line.split(":", 1)[1].strip() for line in info if line.startswith("vendor_id")), "unknown")
    flags = next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), [])
    return f"{vendor}-amx" if "amx_tile" in flags else vendor


GOLDEN = Path(__file__).parent / "golden" / cpu_kind()
METHODS = ["ppo", "cory", "reinforce", "grpo", "elastic_reset", "moe", "cory_chain"]
VOLATILE = ("time/", "memory/")


def golden_config(tmp: Path, method: str, **extra):
    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import tiny_config

    settings = {"steps": 4, "eval_every": 2, "threads": 1, "elastic_reset__reset_freq": 2,
                "ppo__adap_kl_ctrl": True, **extra}
    return tiny_config(tmp, method=method, **settings)


def stable_rows(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not any(p in k for p in VOLATILE)} for row in rows]


def run_rows(tmp: Path, method: str) -> list[dict]:
    """The metrics of a fixed-seed run; cory is stopped after 2 iterations and resumed."""
    from cory.logging import read_jsonl_rows
    from helpers.training import run_trainer

    if method == "cory":
        run_trainer(golden_config(tmp, method, steps=2, save_every=2))
        trainer = run_trainer(golden_config(tmp, method, save_every=2, resume="auto"))
    else:
        trainer = run_trainer(golden_config(tmp, method))
    return stable_rows(read_jsonl_rows(Path(trainer.config.output_dir) / "metrics.jsonl"))


# Metrics added after the golden files were recorded: the transfer diagnostics of every
# topology with edges (issue 41) and the size of each update (issue 59). Their values are
# checked in tests/test_rounds.py.
ADDED_DIAGNOSTICS = ("copy_rate", "transfer_gain", "uses_right", "fixes_wrong", "update_rows", "update_turns")


def added_since_recording(row: dict) -> set[str]:
    return {key for key in row if key.rsplit("/", 1)[-1] in ADDED_DIAGNOSTICS}


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b))
    return a == b


@pytest.mark.parametrize("method", METHODS)
def test_metrics_equal_the_golden_file(tmp_path, method):
    if not GOLDEN.is_dir():
        pytest.skip(f"no golden files for this CPU kind ({GOLDEN.name}): record them from a "
                    "known-good commit with `python tests/test_golden.py --record`")
    expected = json.loads((GOLDEN / f"{method}.json").read_text())
    got = run_rows(tmp_path, method)
    assert [sorted(set(r) - added_since_recording(r)) for r in got] == [sorted(r) for r in expected], \
        "metric names changed"
    for step, (row, want) in enumerate(zip(got, expected)):
        differing = {k: (row[k], want[k]) for k in want if not same(row[k], want[k])}
        assert not differing, f"row {step}: {differing}"


if __name__ == "__main__" and "--record" in sys.argv:
    import tempfile

    sys.path.insert(0, str(Path(__file__).parent))
    GOLDEN.mkdir(exist_ok=True)
    for name in METHODS:
        with tempfile.TemporaryDirectory() as folder:
            rows = run_rows(Path(folder), name)
        (GOLDEN / f"{name}.json").write_text(json.dumps(rows, indent=0, sort_keys=True) + "\n")
        print(f"recorded {name}: {len(rows)} rows")
