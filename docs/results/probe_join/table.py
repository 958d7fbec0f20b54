"""The table in docs/results.md, "The observer's view of the pioneer's answer", from this
folder's probe files:  python docs/results/probe_join/table.py"""

import glob
import json
from pathlib import Path

NAMES = {"smollm2-135m": "SmolLM2-135M", "gemma3-270m": "Gemma-3-270M"}


def pair(rows: dict, condition: str, key: str, form: str = "{:.3f}") -> str:
    """``condition``'s ``key`` under the verbatim join, then the clean one."""
    shown = ["–" if rows[(condition, join)][key] is None else form.format(rows[(condition, join)][key])
             for join in ("verbatim", "clean")]
    return " → ".join(shown)


print("| model | task (queries) | decoding | alone | gold shown: verbatim → clean | own answer shown: "
      "verbatim → clean | `transfer_gain` | `uses_right` | `fixes_wrong` |")
print("|---|---|---|---|---|---|---|---|---|")
for path in sorted(glob.glob(str(Path(__file__).parent / "*.json"))):
    model, task, decoding = Path(path).stem.split("_")
    rows = {(r["condition"], r["join"]): r for r in json.loads(Path(path).read_text())["rows"]}
    alone = rows[("nothing", "")]
    print(f"| {NAMES[model]} | {task} ({alone['queries']}) | {decoding} | {alone['accuracy']:.3f} "
          f"| {pair(rows, 'right', 'accuracy')} | {pair(rows, 'own', 'accuracy')} "
          f"| {pair(rows, 'own', 'difference', '{:+.3f}')} | {pair(rows, 'own', 'uses_right')} "
          f"| {pair(rows, 'own', 'fixes_wrong')} |")
