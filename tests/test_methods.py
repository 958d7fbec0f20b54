"""CORY and the baselines end to end on tiny models: every method, topology and option."""

from pathlib import Path

import pytest
import torch

from cory.agents.elastic_reset import ElasticReset
from cory.logging import read_jsonl_rows
from cory.trainer import Trainer
from cory.types import GenerateRequest, Prompt, Reply
from helpers.training import run_trainer as run


def train_rows(trainer):
    return [r for r in trainer.rows if "task_reward" in r]


@pytest.mark.parametrize("method", ["ppo", "cory", "reinforce", "reinforce_baseline", "rloo", "grpo",
                                    "elastic_reset", "moe", "cory_chain"])
def test_every_method_runs_end_to_end(make_config, method):
    trainer = run(make_config(method=method, steps=2))
    rows = train_rows(trainer)
    assert len(rows) == 2
    assert all(torch.isfinite(torch.tensor(r["task_reward"])) for r in rows)
    assert (Path(trainer.config.output_dir) / "final" / "agent0" / "config.json").exists()


@pytest.mark.parametrize("topology", ["chain", "mesh", "star", "random"])
def test_topologies_with_three_agents(make_config, topology):
    trainer = run(make_config(method="cory", topology__name=topology, topology__n_agents=3, steps=2))
    row = train_rows(trainer)[0]
    assert {"role0/task_reward", "role1/task_reward", "role2/task_reward", "agent2/kl"} <= set(row)


def test_cory_logs_per_role_and_per_agent_and_swaps_every_k(make_config):
    trainer = run(make_config(method="cory", steps=6, roles__swap_every=2, eval_every=0))
    rows = train_rows(trainer)
    assert [r["pioneer/agent"] for r in rows] == [0, 0, 1, 1, 0, 0]
    assert [r["observer/agent"] for r in rows] == [1, 1, 0, 0, 1, 1]
    for key in ("pioneer/task_reward", "observer/collective_reward", "agent0/kl", "agent1/entropy",
                "pioneer/value_loss", "system/task_reward"):
        assert key in rows[0]
    # The observer's prompt holds the query and the pioneer's answer.
    samples = [s for s in read_jsonl_rows(Path(trainer.config.output_dir) / "samples.jsonl")
               if s["phase"] == "train" and s["step"] == 0]
    pioneer, observer = samples[0], samples[1]
    assert observer["role"] == "observer" and pioneer["response"] in observer["prompt"]
    assert observer["prompt"].endswith(observer["query"])


def test_role_exchange_keeps_each_agents_learning_state(make_config):
    config = make_config(method="cory", steps=4, roles__swap_every=2, eval_every=0,
                         ppo__adap_kl_ctrl=True, ppo__use_score_scaling=True)
    trainer = Trainer(config)
    history = []
    for agent in trainer.agents.agents:
        original = agent.update

        def recording(scores, step, agent=agent, original=original):
            before = snapshot(agent)
            stats = original(scores, step)
            history.append((step, agent.index, before, snapshot(agent)))
            return stats
        agent.update = recording
    try:
        trainer.train()
    finally:
        trainer.close()
    for index in (0, 1):
        mine = [h for h in history if h[1] == index]
        assert [h[0] for h in mine] == [0, 1, 2, 3]
        for previous, current in zip(mine, mine[1:]):
            assert current[2] == previous[3]  # state before the update = state after the last one
        adam_steps, _, moments = mine[-1][3]
        assert adam_steps == 4 * 2 * 2  # 4 iterations x 2 epochs x 2 mini-batches, never reset
        assert moments == 4 * config.ppo.batch_size


def snapshot(agent):
    adam = agent.learner.optimizer.state_dict()["state"]
    steps = int(next(iter(adam.values()))["step"]) if adam else 0
    return steps, agent.learner.kl_ctl.value, agent.learner.moments.count


def test_cory_raises_both_agents_toy_reward(make_config):
    trainer = run(make_config(method="cory", steps=40, eval_every=0, roles__swap_every=5,
                              ppo__batch_size=16, ppo__mini_batch_size=8, generation__max_new_tokens=8))
    rows = train_rows(trainer)
    for agent in ("agent0", "agent1"):
        first = sum(r[f"{agent}/task_reward"] for r in rows[:5]) / 5
        last = sum(r[f"{agent}/task_reward"] for r in rows[-5:]) / 5
        assert last > first + 0.15, (agent, first, last)


def test_heterogeneous_pair_talks_in_text(make_config):
    trainer = run(make_config(method="cory", steps=2, agents__models=["tiny-random", "tiny-random-gpt2"]))
    agents = trainer.agents.agents
    assert len(agents[0].tokenizer) != len(agents[1].tokenizer)
    assert agents[0].reference is not agents[1].reference
    row = train_rows(trainer)[0]
    assert "agent1/kl" in row and "observer/task_reward" in row


def test_agents_of_one_base_share_one_reference(make_config):
    trainer = Trainer(make_config(method="cory"))
    first, second = trainer.agents.agents
    assert first.reference is second.reference
    assert first.policy.lm is not second.policy.lm
    trainer.close()


def test_lora_agents_share_one_base_and_train_only_their_adapter(make_config):
    trainer = Trainer(make_config(method="cory", steps=2, agents__lora={"enabled": True, "r": 4}))
    first, second = trainer.agents.agents
    assert first.policy.lm is second.policy.lm  # one base model in memory
    base_weight = dict(first.policy.lm.named_parameters())
    frozen_name = next(n for n in base_weight if "lora" not in n and "weight" in n)
    frozen_before = base_weight[frozen_name].detach().clone()
    assert all(".agent0." in name for name in first.learner.trainable)
    assert all(".agent1." in name for name in second.learner.trainable)
    try:
        trainer.train()
    finally:
        trainer.close()
    assert torch.equal(dict(first.policy.lm.named_parameters())[frozen_name], frozen_before)
    a = next(v for k, v in first.learner.trainable.items() if "lora_B" in k)
    b = next(v for k, v in second.learner.trainable.items() if "lora_B" in k)
    assert not torch.equal(a, b)
    merged = Path(trainer.config.output_dir) / "final" / "agent1"
    assert (merged / "model.safetensors").exists() and (merged / "adapter").is_dir()


def test_moe_system_answer_is_the_higher_value_reply():
    from cory.multi.episode import Episode
    from cory.multi.layout import TurnLayout
    from cory.multi.system_answer import system_choice
    from cory.multi.topology import build_topology

    def reply(values):
        return Reply(["x"] * 3, values, [0.0] * 3, [1] * 3, [False] * 3, 0)
    episode = Episode([Prompt("q")] * 3, TurnLayout.of(build_topology("independent", 2), [0, 1]), [["q"] * 3] * 2,
                      [reply([0.1, 0.9, -1.0]), reply([0.5, 0.2, -0.5])], torch.zeros(2, 3), {})
    assert system_choice(episode, "value").tolist() == [1, 0, 1]
    assert system_choice(episode, "last").tolist() == [1, 1, 1]


def test_moe_logs_the_selected_answers_reward(make_config):
    trainer = run(make_config(method="moe", steps=2))
    row = train_rows(trainer)[0]
    assert {"system/task_reward", "role0/task_reward", "role1/task_reward", "agent1/value_loss"} <= set(row)


def test_elastic_reset_maths_on_a_tiny_parameter_set():
    param = torch.nn.Parameter(torch.tensor([0.0, 2.0]))
    reset = ElasticReset({"w": param}, decay=0.9, reset_freq=3)
    with torch.no_grad():
        param.copy_(torch.tensor([10.0, 12.0]))
    reset.update_ema()  # 0.9 * init + 0.1 * online
    assert reset.ema["w"].tolist() == pytest.approx([1.0, 3.0])
    with reset.ema_weights():
        assert param.tolist() == pytest.approx([1.0, 3.0])
    assert param.tolist() == [10.0, 12.0]
    assert [reset.due(i) for i in range(7)] == [False, False, False, True, False, False, True]
    reset.reset()
    assert param.tolist() == pytest.approx([1.0, 3.0])  # online <- EMA
    assert reset.ema["w"].tolist() == [0.0, 2.0]  # EMA <- initial


def test_elastic_reset_in_the_agent_resets_to_the_ema(make_config):
    trainer = Trainer(make_config(method="elastic_reset", steps=3, eval_every=0,
                                  elastic_reset__reset_freq=2, elastic_reset__decay=0.5,
                                  elastic_reset__ema_every="iteration"))
    agent = trainer.agents.agents[0]
    seen = {}
    original = agent._elastic_step

    def spy(step):
        if step == 2:
            agent.learner.elastic.update_ema()  # what the real call does first
            seen["ema"] = {n: t.clone() for n, t in agent.learner.elastic.ema.items()}
            agent.learner.elastic.update_ema = lambda: None
        return original(step)
    agent._elastic_step = spy
    try:
        trainer.train()
    finally:
        trainer.close()
    rows = train_rows(trainer)
    assert [r["agent0/elastic_reset"] for r in rows] == [0.0, 0.0, 1.0]
    for name, param in agent.learner.trainable.items():
        assert torch.equal(param.detach(), seen["ema"][name])
        assert torch.equal(agent.learner.elastic.ema[name], agent.learner.elastic.initial[name])


def test_kl_against_the_ema_option_runs(make_config):
    trainer = run(make_config(method="elastic_reset", steps=2, elastic_reset__kl_reference="ema"))
    assert len(train_rows(trainer)) == 2


def test_full_kl_penalty_runs_and_is_non_negative(make_config):
    from cory.agents.factory import build_agents

    (agent,) = build_agents(make_config(ppo__kl_penalty="full", ppo__learning_rate=0.05))
    agent.generate(GenerateRequest(["abc", "de", "fgh", "i"] * 2, step=0))
    agent.update([1.0, 0.0] * 4, step=0)
    agent.generate(GenerateRequest(["abc", "de", "fgh", "i"] * 2, step=1))
    assert (agent.held.rollouts[0].kl_tokens >= -1e-6).all() and agent.held.rollouts[0].kl_tokens.sum() > 0


def test_learning_rate_schedules():
    from cory.agents.optimizer import lr_lambda

    linear, cosine, constant = lr_lambda("linear", 2, 10), lr_lambda("cosine", 0, 10), lr_lambda("constant", 0, 10)
    assert [linear(s) for s in (0, 1, 2, 6, 10)] == pytest.approx([0.5, 1.0, 1.0, 0.5, 0.0])
    assert [cosine(s) for s in (0, 5, 10)] == pytest.approx([1.0, 0.5, 0.0])
    assert constant(7) == 1.0


def test_bfloat16_cory_runs_and_keeps_its_weights_in_bfloat16(make_config):
    trainer = run(make_config(method="cory", steps=2, dtype="bfloat16", eval_every=0))
    rows = train_rows(trainer)
    assert all(torch.isfinite(torch.tensor([r["kl"], r["task_reward"], r["policy_loss"]])).all() for r in rows)
    assert {p.dtype for agent in trainer.agents.agents for p in agent.learner.trainable.values()} == {torch.bfloat16}


def test_a_ppo_key_the_algorithm_ignores_warns_when_the_run_is_built(make_config):
    from cory.errors import ConfigWarning
    from cory.trainer import Trainer

    with pytest.warns(ConfigWarning, match=r"ppo.vf_coef = 0.5 has no effect: algorithm 'grpo'"):
        Trainer(make_config(method="grpo", ppo__vf_coef=0.5)).close()
