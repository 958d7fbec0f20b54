"""The confirmation of a screen (docs/preregistration.md, step 4 of its rule) and the "where
cooperation pays" table.

A confirmation suite re-runs the cell the pre-registered rule selected for a model, against
PPO, on fresh seeds. Its test is the exact one-sided sign-flip test of ``arm > PPO`` on the
paired differences in reward at the pair's matched KL, with the paired t-interval beside it,
and a Holm correction over the family of confirmatory tests (one per model). A verdict reads
"higher than PPO" only where the Holm-adjusted p is below ``ALPHA``; otherwise "not shown".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from cory.errors import ConfigError
from cory.experiments.screen import (ALPHA, Cell, Selection, detectable_effect, markdown_table, power_with,
                                     screen_cells, select)
from cory.experiments.stats import Interval, holm, sign_flip_p, t_interval


@dataclass
class Confirmation:
    """One model's confirmatory test: its selected cell's runs on fresh seeds."""

    selection: Selection
    cell: Cell
    p: float  # exact one-sided sign-flip p of arm > PPO
    holm_p: float = math.nan

    @property
    def interval(self) -> Interval:
        return t_interval(self.cell.differences)

    @property
    def complete(self) -> bool:
        return self.selection.seeds is not None and len(self.cell.differences) >= self.selection.seeds

    @property
    def verdict(self) -> str:
        reading = "higher than PPO" if self.holm_p < ALPHA else "not shown"
        if self.complete:
            return reading
        return f"interim, {len(self.cell.differences)} of {self.selection.seeds} planned seeds: {reading}"


def _same_cell(a: Cell, b: Cell) -> bool:
    return (a.model, a.task, a.arm) == (b.model, b.task, b.arm)


def confirm(screened: list[Cell], confirming: list[Cell]) -> list[Confirmation]:
    """Each confirmation cell tested against the selection the screen's cells give, Holm over
    the family. A cell the rule did not select, or one reusing a screening seed, is refused."""
    selections = {s.model: s for s in select(screened)}
    results = []
    for cell in confirming:
        selection = selections.get(cell.model)
        if selection is None or selection.best is None or selection.seeds is None \
                or not _same_cell(selection.best, cell):
            chosen = (f"{selection.best.task} / {selection.best.arm} with {selection.seeds} seeds"
                      if selection and selection.best and selection.seeds else "nothing")
            raise ConfigError(f"confirmation of {cell.model} on {cell.task} / {cell.arm}: the pre-registered rule "
                              f"selected {chosen} for this model; confirm only the selected cell")
        reused = sorted(set(cell.seeds) & set(selection.best.seeds))
        if reused:
            raise ConfigError(f"confirmation of {cell.model} on {cell.task} / {cell.arm} reuses screening seed(s) "
                              f"{', '.join(map(str, reused))}; confirmation seeds start at 100")
        results.append(Confirmation(selection, cell, sign_flip_p(cell.differences, "greater")))
    for result, adjusted in zip(results, holm([r.p for r in results])):
        result.holm_p = adjusted
    return results


def _p(value: float) -> str:
    return f"{value:.4f}" if math.isfinite(value) else "n/a"


def confirmation_table(confirmations: list[Confirmation]) -> list[str]:
    """The confirmatory family: per model its cell, seeds, differences, test and verdict."""
    return markdown_table(
        ["model", "cell", "seeds", "reward at matched KL − PPO, per seed", "mean [95 % paired t]",
         "p (one-sided sign-flip)", "Holm p", "verdict"],
        [[c.cell.model, f"{c.cell.task} / {c.cell.arm}", ", ".join(map(str, c.cell.seeds)),
          ", ".join(f"{v:+.3f}" for v in c.cell.differences), str(c.interval), _p(c.p), _p(c.holm_p), c.verdict]
         for c in confirmations])


def _seeds(n: int) -> str:
    return f"{n} seed" if n == 1 else f"{n} seeds"


def _screen_row(cell: Cell, selection: Selection) -> list[str]:
    n = len(cell.differences)
    if selection.best is not None and _same_cell(selection.best, cell):
        verdict = f"selected: {selection.verdict}" if selection.seeds else selection.verdict
    else:
        verdict = "not selected"
    power = (f"80 % only for effects ≥ {detectable_effect(n, selection.sd):.3f}"
             if n and selection.sd > 0 else "n/a")
    return [cell.model, cell.task, cell.arm, f"screen, {_seeds(n)}", str(t_interval(cell.differences)),
            f"{verdict} (screening only)", power]


def _confirmed_row(result: Confirmation) -> list[str]:
    cell, selection = result.cell, result.selection
    assert selection.best is not None  # confirm() accepts only a selected cell
    power = (f"{power_with(len(cell.differences), selection.best.mean, selection.sd):.0%} "
             f"for the screen's {selection.best.mean:+.3f}")
    return [cell.model, cell.task, cell.arm, f"confirmation, {_seeds(len(cell.differences))}", str(result.interval),
            f"{result.verdict} (Holm p {_p(result.holm_p)})", power]


def where_cooperation_pays(screened: list[Cell], confirmations: list[Confirmation]) -> list[str]:
    """Every screened cell with its verdict, effect, interval and power; a confirmed cell reads
    from its confirmation, every other from the screen."""
    selections = {s.model: s for s in select(screened)}
    rows = []
    for cell in sorted(screened, key=lambda c: (c.model, -c.mean if math.isfinite(c.mean) else math.inf)):
        confirmed = [c for c in confirmations if _same_cell(c.cell, cell)]
        rows.append(_confirmed_row(confirmed[0]) if confirmed else _screen_row(cell, selections[cell.model]))
    return markdown_table(["model", "task", "arm", "evidence", "reward at matched KL − PPO [95 % paired t]",
                           "verdict", "power (one-sided, α 0.05)"], rows)


def confirmation_report(screen_folders: list[Path], confirm_folders: list[Path]) -> str:
    """Markdown: the confirmatory family (when there are confirmation suites), then the "where
    cooperation pays" table over every screened cell."""
    screened = screen_cells(screen_folders)
    confirmations = confirm(screened, screen_cells(confirm_folders)) if confirm_folders else []
    lines = []
    if confirmations:
        lines += ["### Confirmation", ""] + confirmation_table(confirmations) + [""]
    lines += ["### Where cooperation pays", ""] + where_cooperation_pays(screened, confirmations)
    return "\n".join(lines) + "\n"
