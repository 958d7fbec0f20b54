"""Cooperation in rounds: the unrolled topology, prompts that carry earlier answers, agents
that train on all their turns, sum and difference credit, the system's vote, the transfer
diagnostics, and the config errors."""

import pytest
import torch

from cory.agents.agent import Agent
from cory.batches import Rollout
from cory.config.loading import resolve
from cory.config.validation import ignored_settings
from cory.errors import ConfigError, CoryError
from cory.multi.collective import difference_credit, discount_turns, sum_credit, training_rewards
from cory.multi.episode import Draw, Episode, play_episode
from cory.multi.layout import TurnLayout
from cory.multi.system_answer import majority_turn, system_choice
from cory.multi.topology import build_topology
from cory.multi.transfer import copy_rate, flip_rates, overlap, transfer_metrics
from cory.seeding import generator
from cory.trainer import Trainer
from cory.types import GenerateRequest, Prompt, Reply
from helpers.training import run_trainer
from helpers.training import run_trainer


def test_two_rounds_unroll_cory_into_four_turns_each_seeing_the_earlier_answers():
    refine = build_topology("pioneer_observer", 2, rounds=2)
    assert refine.n_turns == 4
    assert [refine.inputs(t) for t in range(4)] == [(), (0,), (0, 1), (0, 1, 2)]
    assert refine.turn_names() == ["round0/pioneer", "round0/observer", "round1/pioneer", "round1/observer"]
    debate = build_topology("independent", 3, rounds=2)
    assert [debate.inputs(t) for t in range(6)] == [(), (), (), (0, 1, 2), (0, 1, 2), (0, 1, 2)]
    assert build_topology("single", 1).edges() == [] and build_topology("independent", 2).edges() == []
    assert build_topology("single", 1, rounds=3).edges() == [(0, 1), (1, 2)]


def test_a_second_rounds_prompts_carry_every_first_round_answer(make_config):
    trainer = Trainer(make_config(method="refine"))
    try:
        queries = trainer.task.train[:4]
        episode = play_episode(trainer.agents, TurnLayout.of(trainer.topology, [0, 1]), trainer.task, trainer.reward,
                               queries, Draw(step=0))
    finally:
        trainer.close()
    texts = [reply.texts for reply in episode.replies]
    for i, query in enumerate(queries):  # the toy task's templates: "{answers}|{query}", "{answers}||{query}"
        assert episode.prompts[0][i] == query.query
        assert episode.prompts[1][i] == f"{texts[0][i]}|{query.query}"
        assert episode.prompts[2][i] == f"{texts[0][i]}\n{texts[1][i]}||{query.query}"
        assert episode.prompts[3][i] == f"{texts[0][i]}\n{texts[1][i]}\n{texts[2][i]}||{query.query}"


def test_an_agent_keeps_every_turn_and_its_one_update_trains_on_all_of_them(make_config):
    trainer = Trainer(make_config(method="refine", ppo__batch_size=4, ppo__mini_batch_size=4))
    agent: Agent = trainer.agents.agents[0]
    try:
        first = agent.generate(GenerateRequest(["ab", "cd", "ef", "gh"], step=0))
        second = agent.generate(GenerateRequest(["a much longer prompt", "x", "y", "z"], step=0, round=1,
                                                stream="round1"))
        assert len(agent.held.rollouts) == 2 and first.texts != second.texts  # each turn its own draws
        with pytest.raises(CoryError, match="got 4 scores for 8 responses"):
            agent.update([1.0] * 4, step=0)
        agent.generate(GenerateRequest(["ab", "cd", "ef", "gh"], step=0))
        agent.generate(GenerateRequest(["ab", "cd", "ef", "gh"], step=0, round=1, stream="round1"))
        stats = agent.update([1.0] * 8, step=0)
        assert agent.held.rollouts == [] and "fault" not in stats
        # 8 rows of mini-batch 4: two optimiser steps per epoch, as a batch of 8 would take
        assert len(agent.learner.optimizer.state) > 0
        with pytest.raises(CoryError, match="keep round 1 while holding 0"):
            agent.generate(GenerateRequest(["ab"], step=1, round=1))
    finally:
        trainer.close()


def test_each_mini_batch_holds_rows_of_one_turn_and_every_row_comes_once_per_epoch(make_config):
    from cory.agents.minibatch_steps import MinibatchSteps
    from cory.agents.settings import AgentSettings

    settings = AgentSettings.of(make_config(method="refine", ppo__batch_size=8, ppo__mini_batch_size=4,
                                            ppo__gradient_accumulation_steps=2))
    steps = MinibatchSteps(0, torch.nn.Identity(), None, settings, None, torch.device("cpu"))
    groups = steps.groups([8, 8], step=3, epoch=1)
    minibatches = [rows for group in groups for rows in group]
    assert [len(group) for group in groups] == [2, 2] and all(len(rows) == 4 for rows in minibatches)
    assert all(bool((rows < 8).all()) or bool((rows >= 8).all()) for rows in minibatches)
    assert sorted(torch.cat(minibatches).tolist()) == list(range(16))
    one_turn = steps.groups([8], step=3, epoch=1)  # one turn: one shuffle of its rows, as before rounds
    expected = torch.randperm(8, generator=generator("minibatch", settings.seed, 3, 0, 1)).split(4)
    assert [rows.tolist() for group in one_turn for rows in group] == [rows.tolist() for rows in expected]


def test_turns_are_joined_into_one_rollout_with_masked_padding():
    def rollout(query_width, response_width, rows, fill):
        shape_q, shape_r = (rows, query_width), (rows, response_width)
        ones = torch.ones(shape_r)
        return Rollout(torch.full(shape_q, fill), torch.ones(shape_q, dtype=torch.long), torch.full(shape_r, fill),
                       torch.ones(shape_r, dtype=torch.long), *(ones * fill for _ in range(5)))

    a, b = rollout(3, 2, 2, 5), rollout(1, 4, 1, 7)
    assert Rollout.concat([a]) is a
    joined = Rollout.concat([a, b])
    assert joined.query_ids.tolist() == [[5, 5, 5], [5, 5, 5], [0, 0, 7]]  # left-padded queries
    assert joined.query_mask.tolist() == [[1, 1, 1], [1, 1, 1], [0, 0, 1]]
    assert joined.response_mask.tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]]  # right-padded
    assert joined.logprobs.tolist() == [[5, 5, 0, 0], [5, 5, 0, 0], [7, 7, 7, 7]]
    assert joined.kl_sum().tolist() == [0.0, 0.0, 0.0]


def test_sum_credit_mixes_each_round_and_the_turn_discount_adds_later_turns():
    # refine: turns (round0 pioneer, round0 observer, round1 pioneer, round1 observer), 1 query
    rewards = torch.tensor([[1.0], [0.0], [0.0], [1.0]])
    assert sum_credit(rewards, 2, 1.0).flatten().tolist() == [1.0, 1.0, 1.0, 1.0]
    assert sum_credit(rewards, 2, 0.5).flatten().tolist() == [1.0, 0.5, 0.5, 1.0]
    assert discount_turns(sum_credit(rewards, 2, 0.0), 2, 0.5).flatten().tolist() == [1.0, 0.5, 0.0, 1.0]
    three_rounds = torch.tensor([[1.0], [2.0], [4.0]])  # single agent, three rounds
    assert discount_turns(three_rounds, 1, 0.5).flatten().tolist() == [1.0 + 0.5 * 2 + 0.25 * 4, 2.0 + 0.5 * 4, 4.0]


def test_difference_credit_equals_hand_computed_values():
    # CORY, one round, three queries: the pioneer earns what its answer changed for the observer.
    task = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])  # pioneer, observer
    observer_alone = torch.tensor([0.0, 1.0, 1.0])
    credited = difference_credit(task, {(0, 1): observer_alone}, lam=1.0)
    assert credited.tolist() == [[2.0, 0.0, 0.0], [1.0, 1.0, 0.0]]
    half = difference_credit(task, {(0, 1): observer_alone}, lam=0.5)
    assert half[0].tolist() == [1.5, 0.0, 0.5]
    # refine: turn 3 sees 0, 1, 2; turn 2 sees 0, 1; turn 1 sees 0 (one query)
    refine = torch.tensor([[0.0], [1.0], [1.0], [1.0]])
    without = {(0, 1): torch.tensor([0.0]), (0, 2): torch.tensor([1.0]), (1, 2): torch.tensor([0.0]),
               (0, 3): torch.tensor([1.0]), (1, 3): torch.tensor([0.0]), (2, 3): torch.tensor([1.0])}
    credited = difference_credit(refine, without, lam=1.0)
    # turn 0: 0 + (1-0) + (1-1) + (1-1) = 1; turn 1: 1 + (1-0) + (1-0) = 3; turn 2: 1 + (1-1) = 1; turn 3: 1
    assert credited.flatten().tolist() == [1.0, 3.0, 1.0, 1.0]
    # with the turn discount, the pioneer's first turn also earns half its second
    total = training_rewards(refine, without, 2, "difference", 1.0, turn_discount=0.5)
    assert total.flatten().tolist() == [1.5, 3.5, 1.0, 1.0]


def test_difference_credit_normalises_a_counterfactual_with_its_turns_statistics():
    task = torch.tensor([[1.0, 3.0], [2.0, 4.0]])  # each row: mean m, std 1 -> z = [-1, 1]
    credited = difference_credit(task, {(0, 1): torch.tensor([3.0, 3.0])}, lam=1.0, normalize=True)
    # observer z = [-1, 1]; its counterfactual 3 in its own units is z = 0 -> gain [-1, 1]
    assert credited[0].tolist() == pytest.approx([-2.0, 2.0])
    assert credited[1].tolist() == pytest.approx([-1.0, 1.0])


def test_sum_credit_of_one_round_is_todays_collective_reward():
    from cory.multi.collective import collective_rewards

    task = torch.tensor([[0.3, -1.2, 2.0], [1.1, 0.4, -0.5]])
    assert torch.equal(training_rewards(task, {}, 2, "sum", 1.0), collective_rewards(task, 1.0))
    assert torch.equal(training_rewards(task, {}, 2, "sum", 1.0, True), collective_rewards(task, 1.0, True))


def test_the_overlap_and_copy_rate_follow_their_definition():
    assert overlap("the cat sat down", "the cat sat down today") == 1.0
    assert overlap("the cat sat down", "a cat sat up") == pytest.approx(1 / 3)  # bigrams: 1 of 3
    assert overlap("Forty", "forty two") == 1.0  # one word: compared as a single word
    assert overlap("", "anything") == 0.0
    # 4 of 5 bigrams shared = 0.8: a copy at the threshold; 3 of 5 is not
    assert copy_rate(["a b c d e f", "a b c d x y"], [["a b c d e z", "a b c d e f"]]) == pytest.approx(0.5)


def test_diagnostics_on_constructed_answers():
    cory = build_topology("pioneer_observer", 2)
    texts = [["#### 4", "#### 5", "#### 6", "#### 7"],  # pioneer
             ["#### 4", "no idea at all", "#### 6", "#### 9"]]  # observer
    correct = [[True, True, False, False], [True, False, True, False]]
    rewards = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0]])
    plain = {1: torch.tensor([0.0, 0.0, 1.0, 1.0])}
    metrics = transfer_metrics(cory, texts, rewards, correct, plain)
    assert metrics["observer/copy_rate"] == 0.5  # the first and third repeat the pioneer
    assert metrics["observer/uses_right"] == 0.5  # right given a right pioneer: 1 of 2
    assert metrics["observer/fixes_wrong"] == 0.5  # right given a wrong pioneer: 1 of 2
    assert metrics["observer/transfer_gain"] == pytest.approx(0.0)  # 0.5 - 0.5
    assert metrics["copy_rate"] == 0.5 and metrics["uses_right"] == 0.5
    assert "pioneer/copy_rate" not in metrics  # a role shown nothing has no diagnostics


def test_a_rate_whose_condition_never_occurs_is_left_out():
    cory = build_topology("pioneer_observer", 2)
    metrics = transfer_metrics(cory, [["x"], ["y"]], torch.zeros(2, 1), [[False], [True]])
    assert "observer/uses_right" not in metrics and metrics["observer/fixes_wrong"] == 1.0


def test_flip_rates_between_rounds():
    refine = build_topology("pioneer_observer", 2, rounds=2)
    correct = [[True, True, False, False], [False, False, False, True],  # round 0: pioneer, observer
               [True, False, True, False], [True, True, True, True]]  # round 1
    flips = flip_rates(refine, correct)
    assert flips["round1/pioneer/flip_right_wrong"] == 0.5  # right, right -> right, wrong
    assert flips["round1/pioneer/flip_wrong_right"] == 0.5
    assert "round1/observer/flip_right_wrong" in flips and flips["round1/observer/flip_right_wrong"] == 0.0
    assert flips["round1/observer/flip_wrong_right"] == 1.0
    assert flips["round1/flip_right_wrong"] == pytest.approx(1 / 3)  # pooled: 1 of 3 right answers lost
    assert flips["round1/flip_wrong_right"] == pytest.approx(4 / 5)


def test_the_vote_takes_the_majority_final_answer_of_the_last_round():
    assert majority_turn(["#### 3", "#### 4", "so 3"], [4, 5, 6]) == 6  # two say 3: the later one
    assert majority_turn(["#### 3", "#### 4"], [2, 3]) == 3  # a tie: the later turn
    assert majority_turn(["no number", "#### 4", "none"], [0, 1, 2]) == 1  # only numbers vote
    assert majority_turn(["none", "none"], [0, 1]) == 1
    debate = build_topology("independent", 3, rounds=2)
    reply = lambda texts: Reply(texts, [0.0] * 2, [0.0] * 2, [1] * 2, [False] * 2, 0)  # noqa: E731
    episode = Episode([Prompt("q1"), Prompt("q2")], TurnLayout.of(debate, [0, 1, 2]), [[]] * 6,
                      [reply(["#### 1", "#### 1"])] * 3 + [reply(["#### 2", "#### 5"]), reply(["#### 2", "#### 6"]),
                                                            reply(["#### 9", "#### 6"])], torch.zeros(6, 2), {})
    assert system_choice(episode, "vote").tolist() == [4, 5]
    assert system_choice(episode, "last").tolist() == [5, 5]


def test_difference_credit_is_logged_beside_the_transfer_it_pays_for(make_config):
    trainer = run_trainer(make_config(method="cory", steps=2, collective__credit="difference"))
    for row in (r for r in trainer.rows if "observer/transfer_gain" in r and "pioneer/task_reward" in r):
        # lambda 1: the pioneer's reward is its own plus the observer's gain over answering alone
        assert row["pioneer/collective_reward"] == pytest.approx(
            row["pioneer/task_reward"] + row["observer/transfer_gain"], abs=1e-6)
        assert row["observer/collective_reward"] == pytest.approx(row["observer/task_reward"], abs=1e-6)
        assert row["time/counterfactual"] > 0
    assert "eval/observer/transfer_gain" in trainer.final and "eval/copy_rate" in trainer.final


def test_refine_logs_every_round_and_samples_carry_the_round(make_config):
    trainer = run_trainer(make_config(method="refine", steps=2))
    row = next(r for r in trainer.rows if "round1/observer/task_reward" in r and "pioneer/task_reward" in r)
    assert row["observer/task_reward"] == row["round1/observer/task_reward"]  # a role's metrics: its last round
    assert row["round0/task_reward"] == pytest.approx(
        (row["round0/pioneer/task_reward"] + row["round0/observer/task_reward"]) / 2)
    assert row["agent0/response_length"] > 0 and "round1/pioneer/copy_rate" in row
    assert "eval/round0/observer/transfer_gain" in trainer.final and "eval/round1/pioneer/kl" in trainer.final
    from cory.logging import read_jsonl_rows
    from pathlib import Path

    samples = read_jsonl_rows(Path(trainer.config.output_dir) / "samples.jsonl")
    assert {s["round"] for s in samples} == {0, 1}
    # an episode index ties a first answer to its revision; every row says which agent spoke
    first = [s for s in samples if s["step"] == 0 and s["phase"] == "train" and s["episode"] == 0]
    assert [(s["round"], s["role"]) for s in first] == [(0, "pioneer"), (0, "observer"), (1, "pioneer"), (1, "observer")]
    assert {s["agent"] for s in first} == {0, 1}
    # the pre-registered role-level diagnostics exist for refine too: the role's last round's
    assert trainer.final["eval/observer/transfer_gain"] == trainer.final["eval/round1/observer/transfer_gain"]
    assert row["observer/copy_rate"] == row["round1/observer/copy_rate"]
    # what each update trained on: both agents answered in both rounds
    batch = trainer.config.ppo.batch_size
    assert (row["agent0/update_turns"], row["agent0/update_rows"]) == (2, 2 * batch)


def test_debate_lets_three_agents_answer_alone_then_see_every_first_answer(make_config):
    trainer = run_trainer(make_config(method="debate", steps=2, eval_every=1))
    row = next(r for r in trainer.rows if "round1/role2/task_reward" in r and "agent2/kl" in r)
    assert {"round0/role0/task_reward", "round1/role0/copy_rate", "system/task_reward"} <= set(row)
    assert "round0/role1/copy_rate" not in row  # no role sees another in the first round
    assert "eval/round1/role1/transfer_gain" in trainer.final


def test_each_agent_normalises_only_its_own_rewards(make_config):
    """Per-agent normalisation (Dr. MAS) is how the update already works: every statistic an
    agent normalises with (score moments, advantage whitening) is its own."""
    trainer = Trainer(make_config(method="refine", collective__lambda=0.5, ppo__use_score_scaling=True,
                                   ppo__use_score_norm=True))
    try:
        trainer.run_iteration(0)
        first, second = trainer.agents.agents
        assert first.learner.moments is not second.learner.moments
        assert first.learner.moments.count == second.learner.moments.count == 2 * 8  # both turns, its own
        assert first.learner.moments.mean != pytest.approx(second.learner.moments.mean)
    finally:
        trainer.close()


def test_refine_raises_its_second_rounds_toy_reward(make_config):
    trainer = run_trainer(make_config(method="refine", steps=30, eval_every=0, ppo__batch_size=16,
                                      ppo__mini_batch_size=8, generation__max_new_tokens=8))
    rows = [r for r in trainer.rows if "round1/task_reward" in r]
    first = sum(r["round1/task_reward"] for r in rows[:5]) / 5
    last = sum(r["round1/task_reward"] for r in rows[-5:]) / 5
    assert last > first + 0.15, (first, last)


@pytest.mark.parametrize("overrides, message", [
    ({"topology": {"rounds": 0}}, "topology.rounds"),
    ({"method": "ppo", "collective": {"credit": "difference", "lambda": 1.0}}, "collective.credit: difference"),
    ({"method": "moe", "collective": {"credit": "difference", "lambda": 1.0}}, "topology 'independent'"),
    ({"method": "cory", "collective": {"credit": "difference", "lambda": 0.0}}, "collective.lambda"),
    ({"method": "cory", "topology": {"answer": "vote"}}, "topology.answer: vote"),
    ({"method": "refine", "task": {"revise_template": "{answers} only"}}, "task.revise_template"),
    ({"method": "refine", "task": {"revise_template": "{query} {previous}"}}, "task.revise_template"),
    ({"method": "refine", "collective": {"turn_discount": 1.5}}, "collective.turn_discount"),
])
def test_bad_rounds_and_credit_settings_name_the_key(overrides, message):
    raw = {"model": "tiny-random", "device": "cpu", "task": {"name": "toy"}, **overrides}
    with pytest.raises(ConfigError, match=message):
        resolve(raw)


def test_a_turn_discount_without_rounds_is_reported_as_having_no_effect():
    config = resolve({"model": "tiny-random", "method": "cory", "collective": {"turn_discount": 0.5}})
    assert any("collective.turn_discount" in m for m in ignored_settings(config))
    refine = resolve({"model": "tiny-random", "method": "refine", "collective": {"turn_discount": 0.5}})
    assert not ignored_settings(refine)


@pytest.mark.parametrize("overrides, message", [
    ({"method": "refine", "topology": {"rounds": 1}}, "topology.rounds: method 'refine' answers over 2 rounds"),
    ({"method": "debate", "topology": {"rounds": 1}}, "topology.rounds: method 'debate'"),
    ({"method": "elastic_reset", "elastic_reset": {"enabled": False}}, "elastic_reset.enabled: method 'elastic_reset'"),
])
def test_a_preset_overridden_so_that_it_no_longer_holds_is_refused(overrides, message):
    """The run would train another method under this one's name."""
    with pytest.raises(ConfigError, match=message):
        resolve({"model": "tiny-random", "device": "cpu", "task": {"name": "toy"}, **overrides})
    resolve({"model": "tiny-random", "method": "refine", "topology": {"rounds": 3}})  # still critique and revise


@pytest.mark.parametrize("overrides, key", [
    ({"topology": {"answer": "vote"}, "task": {"name": "arithmetic"}}, "topology.answer"),
    ({"collective": {"lambda": 1.0}}, "collective.lambda"),
    ({"roles": {"swap_every": 5}}, "roles.swap_every"),
])
def test_multi_agent_keys_on_a_single_agent_run_are_reported_as_having_no_effect(overrides, key):
    config = resolve({"model": "tiny-random", "method": "grpo", "algorithm": {"group_size": 2}, **overrides})
    assert [m for m in ignored_settings(config) if m.startswith(f"{key} = ")]
    assert not ignored_settings(resolve({"model": "tiny-random", "method": "cory", **overrides}))
