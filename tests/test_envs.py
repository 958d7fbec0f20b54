"""Environments: the protocol run on constructed environments, batched episodes with turn
limits and failures, the calculator's evaluator and its bad inputs, Plan-Path's grids, solver
and rewards, and a TRL environment_factory class through the adapter."""

from __future__ import annotations

import random

import pytest

from cory.envs.base import Step
from cory.envs.calculator import CalculationError, CalculatorEnvironment, calculate
from cory.envs.plan_path import Grid, PlanPathEnvironment, plan_path_prompts, random_grid, shortest_path
from cory.envs.registry import environment_factory
from cory.envs.rollout import run_episodes
from cory.envs.trl_adapter import ToolEnvironment
from cory.errors import ConfigError
from cory.types import Prompt


@pytest.mark.parametrize(("expression", "value"), [
    ("2 + 3 * 4", "14"), ("(2 + 3) * 4", "20"), ("7 / 2", "3.5"), ("-3 - -4", "1"), ("1 / 3", "0.333333"),
    ("12 × 3 ÷ 4", "9"), (" 10 ", "10"), ("2.5 * 2", "5"),
])
def test_the_calculator_evaluates_arithmetic(expression, value):
    assert calculate(expression) == value


@pytest.mark.parametrize(("expression", "message"), [
    ("", "empty expression"), ("2 +", "cannot read"), ("__import__('os')", "only numbers"),
    ("2 ** 10", "only \\+ - \\* /"), ("1 / 0", "division by zero"), ("9" * 13, "a value beyond"),
    ("-(" * 25 + "1" + ")" * 25, "nested deeper"), ("1+" * 150 + "1", "longer than 200"), ("x + 1", "only numbers"),
    ("True + 1", "only numbers"),
])
def test_the_calculator_refuses_what_it_does_not_read(expression, message):
    with pytest.raises(CalculationError, match=message):
        calculate(expression)


def test_a_calculator_episode_answers_calls_then_scores_the_final_answer():
    environment = CalculatorEnvironment()
    assert environment.reset(Prompt("What is 17 * 23?", answer="391")) == ""
    step = environment.step("I need 17 * 23. <calc>17 * 23</calc>")
    assert (step.observation, step.done, step.info["tool_calls"]) == ("<result>391</result>", False, 1.0)
    bad = environment.step("<calc>17 ** 23</calc>")
    assert bad.observation.startswith("<result>error: only + - * /") and bad.info["invalid"] == 1.0
    assert environment.step("So the answer is #### 391").reward == 1.0
    assert environment.step("#### 390").reward == 0.0


def test_grids_are_solvable_their_paths_shortest_and_the_splits_apart():
    rng = random.Random(0)
    for _ in range(50):
        grid = random_grid(5, 0.3, rng)
        path = shortest_path(grid)
        assert path is not None and len(path) >= 2
        position = grid.start
        for move in path:  # the path walks free cells to the goal
            dr, dc = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}[move]
            position = (position[0] + dr, position[1] + dc)
            assert grid.free(position)
        assert position == grid.goal
    boxed = Grid(3, frozenset({(0, 1), (1, 0), (1, 1)}), (0, 0), (2, 2))
    assert shortest_path(boxed) is None
    assert shortest_path(Grid(3, frozenset(), (0, 0), (0, 2))) == ["right", "right"]
    train, test = plan_path_prompts(20, 5, 0.3, 0, "train"), plan_path_prompts(20, 5, 0.3, 0, "test")
    assert not {p.answer for p in train} & {p.answer for p in test}
    assert train == plan_path_prompts(20, 5, 0.3, 0, "train")  # from the seed alone


def test_plan_path_moves_refuses_walls_and_edges_and_rewards_the_goal():
    grid = Grid(3, frozenset({(1, 1)}), (0, 0), (2, 2))
    prompt = Prompt("find it", grid.to_json())
    environment = PlanPathEnvironment()
    environment.reset(prompt)
    edge = "Move 1 (up) is blocked by the edge of the grid. You are at (0, 0)."
    assert environment.step("I go up").observation == edge
    blocked = environment.step("right, then down")
    assert blocked.observation == "Move 2 (down) is blocked by a wall at (1, 1). You are at (0, 1)."
    assert blocked.info == {"invalid": 1.0, "moves": 1.0} and not blocked.done
    assert environment.step("no idea").info["invalid"] == 1.0
    finished = environment.step("Right. Down down")
    assert (finished.reward, finished.done, finished.observation) == (1.0, True, "You reached G.")


def test_episodes_step_together_until_done_or_the_turn_limit_and_a_broken_one_fails_alone():
    from helpers.tool_envs import Broken, ThreeTurns

    asked: list[int] = []

    def act(episodes):
        asked.append(len(episodes))
        return [f"action {len(e.actions)}" for e in episodes]
    three = run_episodes(ThreeTurns, [Prompt("a"), Prompt("b")], act, max_turns=5)
    assert asked == [2, 2, 2]  # both episodes act each turn, in one call, until done
    assert [e.reward for e in three] == [1.0, 1.0] and all(e.done for e in three)
    assert three[0].opening == " [3 turns]" and three[0].steps[1].observation == "turn 2 seen"
    cut = run_episodes(ThreeTurns, [Prompt("a")], act, max_turns=2)
    assert not cut[0].done and len(cut[0].actions) == 2 and cut[0].reward == 0.0
    replies = iter([["boom", "fine", "wrong"]])
    broken = run_episodes(Broken, [Prompt("x"), Prompt("y"), Prompt("z")], lambda eps: next(replies), max_turns=3)
    assert broken[0].failed == "turn 1: RuntimeError: exploded"
    assert broken[1].failed is None and broken[1].reward == 1.0
    assert broken[2].failed.startswith("turn 1: TypeError: Broken.step returned str")


def test_a_trl_environment_factory_class_runs_through_the_adapter():
    make = environment_factory(class_path="helpers.tool_envs:Counter", options={"start": 1})
    environment = make()
    assert isinstance(environment, ToolEnvironment) and set(environment.tools) == {"increment"}
    assert environment.reset(Prompt("count")) == "Count to 3. Task: count"
    step = environment.step('<tool_call>{"name": "increment", "arguments": {"by": 1}}</tool_call>')
    assert (step.observation, step.done) == ("<tool_response>2</tool_response>", False)
    assert environment.step('<tool_call>{"name": "jump"}</tool_call>').observation == \
        "<tool_response>error: no tool 'jump'; the tools are increment</tool_response>"
    assert "error: TypeError" in environment.step('<tool_call>{"name": "increment", "arguments": {"x": 1}}</tool_call>'
                                                  ).observation
    assert "in JSON" in environment.step("<tool_call>{not json</tool_call>").observation
    assert environment.step("<tool_call>{\"name\": \"increment\"}</tool_call>").observation == \
        "<tool_response>3</tool_response>"
    last = environment.step("I am done.")
    assert (last.done, last.reward) == (True, 1.0)  # get_reward: the counter is at 3


def test_unknown_or_unbuildable_environments_name_the_key():
    with pytest.raises(ConfigError, match="env.name: unknown environment 'maze'"):
        environment_factory(name="maze")
    with pytest.raises(ConfigError, match="env.class: cannot import module 'no_such_module'"):
        environment_factory(class_path="no_such_module:Env")
    with pytest.raises(ConfigError, match="env.class: module 'helpers.tool_envs' has no class 'Nope'"):
        environment_factory(class_path="helpers.tool_envs:Nope")
    with pytest.raises(ConfigError, match="is not 'module:Class'"):
        environment_factory(class_path="helpers.tool_envs.Counter")
    with pytest.raises(ConfigError, match="could not be built with env.options"):
        environment_factory(class_path="helpers.tool_envs:Counter", options={"colour": 1})()
    with pytest.raises(ConfigError, match="not both"):
        environment_factory(name="calculator", class_path="a:B")
    assert isinstance(environment_factory(name="plan_path")(), PlanPathEnvironment)
    assert isinstance(Step("x"), Step)
