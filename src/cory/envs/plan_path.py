"""Plan-Path: reach the goal on a small grid with walls, one or more moves per turn.

The query shows the grid (``S`` start, ``G`` goal, ``#`` wall, ``.`` free) and asks for moves
(``up``, ``down``, ``left``, ``right``). After each turn the environment applies the reply's
moves in order and answers with the new position, or with the reason a move was refused (a
wall or the edge), which ends that turn's moves. Reaching the goal ends the episode with
reward 1; the turn budget is the episode runner's. Grids are generated solvable (a
breadth-first search finds a path) from a seed, train and held-out grids from separate seeds.
"""

from __future__ import annotations

import json
import random
import re
from collections import deque
from dataclasses import dataclass

from cory.envs.base import Step
from cory.seeding import derive_seed
from cory.types import Prompt

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
MOVE_WORDS = re.compile(r"\b(up|down|left|right)\b", re.IGNORECASE)
Cell = tuple[int, int]


@dataclass(frozen=True)
class Grid:
    """A square grid: ``walls`` as cells, a start and a goal."""

    size: int
    walls: frozenset[Cell]
    start: Cell
    goal: Cell

    def free(self, cell: Cell) -> bool:
        row, column = cell
        return 0 <= row < self.size and 0 <= column < self.size and cell not in self.walls

    def render(self) -> str:
        def mark(cell: Cell) -> str:
            return "S" if cell == self.start else "G" if cell == self.goal else "#" if cell in self.walls else "."
        return "\n".join("".join(mark((r, c)) for c in range(self.size)) for r in range(self.size))

    def to_json(self) -> str:
        return json.dumps({"size": self.size, "walls": sorted(self.walls), "start": self.start, "goal": self.goal})

    @classmethod
    def from_json(cls, text: str) -> Grid:
        data = json.loads(text)
        return cls(data["size"], frozenset(tuple(w) for w in data["walls"]), tuple(data["start"]), tuple(data["goal"]))


def shortest_path(grid: Grid) -> list[str] | None:
    """The moves of a shortest path from start to goal (breadth-first), or None if none exists."""
    previous: dict[Cell, tuple[Cell, str] | None] = {grid.start: None}
    todo = deque([grid.start])
    while todo:
        cell = todo.popleft()
        if cell == grid.goal:
            moves: list[str] = []
            while (step := previous[cell]) is not None:
                cell, move = step
                moves.append(move)
            return moves[::-1]
        for move, (dr, dc) in MOVES.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if grid.free(nxt) and nxt not in previous:
                previous[nxt] = (cell, move)
                todo.append(nxt)
    return None


def random_grid(size: int, density: float, rng: random.Random, min_distance: int = 2) -> Grid:
    """A solvable grid: walls on about ``density`` of the cells, start and goal at least
    ``min_distance`` moves apart along a shortest path (drawn again until both hold)."""
    cells = [(r, c) for r in range(size) for c in range(size)]
    while True:
        start, goal = rng.sample(cells, 2)
        walls = frozenset(cell for cell in cells if cell not in (start, goal) and rng.random() < density)
        grid = Grid(size, walls, start, goal)
        path = shortest_path(grid)
        if path is not None and len(path) >= min_distance:
            return grid


def task_text(grid: Grid) -> str:
    return (f"Find a way from S to G on this grid (# is a wall, . is free):\n{grid.render()}\n"
            "Answer with moves: up, down, left or right.\nMoves:")


def plan_path_prompts(count: int, size: int, density: float, seed: int, split: str) -> list[Prompt]:
    """``count`` solvable grids as prompts (``answer`` holds the grid, ``solution`` a shortest
    path); ``split`` (train, test) separates their random streams."""
    rng = random.Random(derive_seed("plan_path", seed, split))
    grids = [random_grid(size, density, rng) for _ in range(count)]
    return [Prompt(task_text(grid), grid.to_json(), " ".join(shortest_path(grid) or [])) for grid in grids]


class PlanPathEnvironment:
    """One grid per episode, from the prompt's ``answer``; moves are parsed from each reply."""

    def __init__(self) -> None:
        self.grid: Grid | None = None
        self.position: Cell = (0, 0)

    def reset(self, prompt: Prompt) -> str:
        self.grid = Grid.from_json(prompt.answer or "")
        self.position = self.grid.start
        return ""

    def step(self, action: str) -> Step:
        grid = self.grid
        if grid is None:
            raise RuntimeError("PlanPathEnvironment.step before reset")
        moves = [word.lower() for word in MOVE_WORDS.findall(action)]
        if not moves:
            return Step(f"No move found. You are at {self.position}. Write up, down, left or right.",
                        info={"invalid": 1.0})
        for number, move in enumerate(moves, start=1):
            dr, dc = MOVES[move]
            target = (self.position[0] + dr, self.position[1] + dc)
            if not grid.free(target):
                why = "the edge of the grid" if not (0 <= target[0] < grid.size and 0 <= target[1] < grid.size) else \
                    f"a wall at {target}"
                return Step(f"Move {number} ({move}) is blocked by {why}. You are at {self.position}.",
                            info={"invalid": 1.0, "moves": float(number - 1)})
            self.position = target
            if target == grid.goal:
                return Step("You reached G.", reward=1.0, done=True, info={"moves": float(number)})
        return Step(f"You are at {self.position}; G is at {grid.goal}.", info={"moves": float(len(moves))})
