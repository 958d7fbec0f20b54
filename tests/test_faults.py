"""Numeric faults and failing parts: skipped updates, clear stops, named samples, edge cases."""

import math
from pathlib import Path

import pytest
import torch

from cory.checkpoint import step_dirs
from cory.errors import CoryError
from cory.logging import read_jsonl_rows
from cory.rewards.base import RewardError
from cory.trainer import Trainer
from cory.types import GenerateRequest


def python_reward(name):
    return {"reward__name": "python", "reward__function": f"helpers.rewards:{name}"}


def test_nan_rewards_skip_the_update_then_stop_with_a_checkpoint(make_config):
    config = make_config(steps=6, eval_every=0, max_consecutive_faults=3, **python_reward("nan_reward"))
    trainer = Trainer(config)
    before = {n: p.detach().clone() for n, p in trainer.agents.agents[0].learner.trainable.items()}
    with pytest.raises(CoryError, match=r"3 numeric faults in a row .*non-finite reward.*resume=auto"):
        trainer.train()
    trainer.close()
    after = trainer.agents.agents[0].learner.trainable
    assert all(torch.equal(before[n], after[n]) for n in before)  # no update was applied
    run = Path(config.output_dir)
    events = [e for e in read_jsonl_rows(run / "events.jsonl") if e["event"] == "fault"]
    assert [e["step"] for e in events] == [0, 1, 2]
    assert [p.name for p in step_dirs(run / "checkpoints")] == ["step-00000003"]


def test_a_single_fault_is_counted_and_forgotten(make_config):
    config = make_config(steps=3, eval_every=0, **python_reward("length_reward"))
    trainer = Trainer(config)
    agent = trainer.agents.agents[0]
    original = agent.update
    agent.update = lambda scores, step: original([math.inf] * len(scores) if step == 1 else scores, step)
    trainer.train()
    trainer.close()
    rows = [r for r in trainer.rows if r["step"] < 3]
    assert [bool(r.get("fault")) for r in rows] == [False, True, False]
    assert trainer.consecutive_faults == 0


def test_nan_logits_in_the_loop_are_logged_faults(make_config):
    config = make_config(steps=2, eval_every=0, max_consecutive_faults=2)
    trainer = Trainer(config)
    lm = trainer.agents.agents[0].policy.lm
    lm.lm_head.register_forward_hook(lambda module, args, out: out * math.nan)
    with pytest.raises(CoryError, match="non-finite logits"):
        trainer.train()
    trainer.close()
    faults = [r for r in trainer.rows if r.get("fault")]
    assert len(faults) == 2


def test_non_finite_values_skip_the_minibatches(make_config):
    config = make_config(steps=1, eval_every=0)
    trainer = Trainer(config)
    agent = trainer.agents.agents[0]
    with torch.no_grad():
        agent.policy.value_head.summary.bias.fill_(math.inf)
    agent.generate(GenerateRequest(["abc", "de"] * 4, step=0))
    stats = agent.update([0.5] * 8, step=0)
    assert stats["fault"] == 1.0 and "non-finite loss" in stats["fault_reason"]
    trainer.close()


def test_a_failing_reward_names_the_sample(make_config):
    config = make_config(steps=1, eval_every=0, **python_reward("fails_on_x"))
    trainer = Trainer(config)
    from cory.rewards.base import score_safely
    from cory.types import Prompt

    with pytest.raises(RewardError, match=r"failed on query 'q2' with response 'an x here'.*cannot score an x"):
        score_safely(trainer.reward, [Prompt("q1"), Prompt("q2")], ["fine", "an x here"])
    trainer.close()


def test_empty_responses_are_handled(make_config):
    config = make_config(steps=1, eval_every=0)
    trainer = Trainer(config)
    agent = trainer.agents.agents[0]
    eos = agent.tokenizer.eos_token_id
    agent.policy.lm.lm_head.register_forward_hook(lambda m, a, out: out.index_add(
        -1, torch.tensor([eos]), torch.full((*out.shape[:-1], 1), 100.0)))
    reply = agent.generate(GenerateRequest(["abc", "hello"] * 4, step=0))
    assert reply.texts == [""] * 8 and reply.lengths == [1] * 8
    stats = agent.update([0.0, 1.0] * 4, step=0)
    assert "fault" not in stats and math.isfinite(stats["policy_loss"])
    trainer.close()


def test_responses_that_hit_the_length_limit_are_flagged(make_config):
    trainer = Trainer(make_config(steps=1, eval_every=0, generation__max_new_tokens=3))
    row = trainer.run_iteration(0)
    assert row["policy/hit_length_limit"] == 1.0 and row["policy/response_length"] == 3.0
    trainer.close()


def test_prompts_longer_than_the_context_are_cut_from_the_left(make_config):
    trainer = Trainer(make_config(steps=1, eval_every=0, task__max_prompt_tokens=4096))
    agent = trainer.agents.agents[0]
    long_prompt = "word " * 400  # 2000 characters: far over the tiny model's 512 positions
    reply = agent.generate(GenerateRequest([long_prompt, "short"] * 4, step=0))
    assert reply.prompts_truncated == 4
    assert int(agent.held.rollouts[0].query_mask.sum(-1).max()) == 512 - trainer.config.generation.max_new_tokens
    trainer.close()


def test_a_full_disk_while_checkpointing_is_a_clear_error_and_leaves_earlier_checkpoints(
        make_config, monkeypatch):
    import cory.agents.state as agent_module
    from cory.checkpoint import DiskWriteError, latest_good

    config = make_config(steps=4, save_every=2, keep_last=2, eval_every=0)
    real_save = agent_module.save_tensors
    calls = []

    def fills_the_disk(folder, name, tensors):
        calls.append(name)
        if len(calls) > 1:  # the first checkpoint succeeds, the second finds the disk full
            raise OSError(28, "No space left on device")
        real_save(folder, name, tensors)

    monkeypatch.setattr(agent_module, "save_tensors", fills_the_disk)
    trainer = Trainer(config)
    with pytest.raises(DiskWriteError, match=r"checkpoint of step 4 .*No space left.*resume=auto"):
        trainer.train()
    trainer.close()
    checkpoints = Path(config.output_dir) / "checkpoints"
    assert [p.name for p in checkpoints.iterdir()] == ["step-00000002"]  # no half-written folder
    assert latest_good(Path(config.output_dir)) == checkpoints / "step-00000002"

    monkeypatch.setattr(agent_module, "save_tensors", real_save)
    resumed = Trainer(make_config(steps=4, save_every=2, keep_last=2, eval_every=0, resume="auto"))
    resumed.train()
    resumed.close()
    assert [row["step"] for row in resumed.rows] == [0, 1, 2, 3, 4]
