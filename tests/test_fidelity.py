"""The CORY authors' protocol, item by item (docs/fidelity.md): each test fails without its key."""

from __future__ import annotations

import math

import pytest
import torch

from cory.agents.factory import build_agents
from cory.agents.settings import objective_of
from cory.algorithms.objective import compute_targets, minibatch_loss
from cory.batches import MiniBatch, Rollout
from cory.config.loading import load_config
from cory.config.schema import AlgorithmConfig, PPOConfig
from cory.models.generation import SamplingSettings, penalise_repetition, sample
from cory.models.policy import PolicyOutput
from cory.models.registry import load_model, stop_token_ids
from cory.trainer import Trainer
from cory.types import GenerateRequest
from helpers.training import run_trainer
from helpers.training import run_trainer


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random")


def sample_tiny(loaded, settings, stop=None, texts=("hello there", "a", "movie was")):
    enc = loaded.tokenizer(list(texts), return_tensors="pt", padding=True)
    return sample(loaded.model, enc.input_ids, enc.attention_mask, settings,
                  stop if stop is not None else stop_token_ids(loaded), loaded.tokenizer.pad_token_id,
                  generator=torch.Generator().manual_seed(0))


# ---------------------------------------------------------------- generation
def test_repetition_penalty_hand_values():
    logits = torch.tensor([[2.0, -1.0, 0.5, -3.0]])
    seen = torch.tensor([[True, True, False, False]])
    assert penalise_repetition(logits, seen, 2.0).tolist() == [[1.0, -2.0, 0.5, -3.0]]


def test_repetition_penalty_shapes_sampling_but_not_the_recorded_logprobs(tiny):
    free = sample_tiny(tiny, SamplingSettings(max_new_tokens=8, greedy=True), stop=[])
    penalised = sample_tiny(tiny, SamplingSettings(max_new_tokens=8, greedy=True, repetition_penalty=1e4),
                            stop=[])
    enc = tiny.tokenizer(["hello there", "a", "movie was"], padding=True)
    for row, (ids, mask) in enumerate(zip(enc.input_ids, enc.attention_mask)):
        seen = {token for token, m in zip(ids, mask) if m}
        for token in penalised.response_ids[row].tolist():
            assert token not in seen, "a penalised greedy sampler repeated a token"
            seen.add(token)
    assert not torch.equal(free.response_ids, penalised.response_ids)
    # Log-probs are the model's own (as TRL's and the update's forward): the greedy token of
    # the unpenalised run has the highest log-prob, the penalised run's first token less.
    assert (penalised.logprobs[:, 0] <= free.logprobs[:, 0] + 1e-6).all()


def test_eos_is_not_blocked_at_min_new_tokens_zero(tiny):
    free = sample_tiny(tiny, SamplingSettings(max_new_tokens=6, greedy=True), stop=[])
    first = int(free.response_ids[0, 0])
    stopped = sample_tiny(tiny, SamplingSettings(max_new_tokens=6, min_new_tokens=0, greedy=True), stop=[first])
    assert stopped.response_mask[0].tolist() == [1] + [0] * (stopped.response_mask.shape[1] - 1)


def test_length_sampler_bounds_are_inclusive_and_per_batch_budgets_are_shared(make_config):
    from cory.agents.sampling import length_budgets

    config = make_config(method="cory", generation__max_new_tokens=15, generation__length_sampler=[4, 15])
    gen, seed = config.generation, config.seed
    per_row = torch.cat([length_budgets(gen, seed, 0, 64, step, "train") for step in range(20)])
    assert int(per_row.min()) == 4 and int(per_row.max()) == 15
    assert not torch.equal(length_budgets(gen, seed, 0, 64, 0, "train"), length_budgets(gen, seed, 1, 64, 0, "train"))
    gen.length_sampler_per = "batch"
    draws = []
    for step in range(60):
        budget = length_budgets(gen, seed, 0, 64, step, "train")
        assert budget.unique().numel() == 1
        assert torch.equal(budget, length_budgets(gen, seed, 1, 64, step, "train"))
        draws.append(int(budget[0]))
    assert min(draws) == 4 and max(draws) == 15


def test_repetition_penalty_counts_left_padding_only_when_asked(tiny):
    from cory.models.generation import seen_tokens

    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 5]])  # row 0 left-padded with pad id 0
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    plain, authors = seen_tokens(ids, mask, 12, False), seen_tokens(ids, mask, 12, True)
    assert plain[0].nonzero().flatten().tolist() == [5, 6] and plain[1].nonzero().flatten().tolist() == [5, 7, 8, 9]
    assert authors[0].nonzero().flatten().tolist() == [0, 5, 6] and torch.equal(authors[1], plain[1])
    # through the sampler: greedy with a huge penalty never picks the pad token in a padded row
    pad = tiny.tokenizer.pad_token_id
    texts = ("hello there friend", "a", "movie was")
    free = sample_tiny(tiny, SamplingSettings(max_new_tokens=4, greedy=True, repetition_penalty=1e4), stop=[],
                       texts=texts)
    penalised = sample_tiny(tiny, SamplingSettings(max_new_tokens=4, greedy=True, repetition_penalty=1e4,
                                                   penalise_padding=True), stop=[], texts=texts)
    assert pad not in penalised.response_ids[1:].flatten().tolist()
    assert free.response_ids.shape == penalised.response_ids.shape


def test_per_batch_lengths_repeat_after_each_swap_when_asked(make_config):
    from cory.agents.sampling import length_budgets

    config = make_config(method="cory", generation__max_new_tokens=15, generation__length_sampler=[4, 15],
                         generation__length_sampler_per="batch")
    gen, seed = config.generation, config.seed
    plain = [int(length_budgets(gen, seed, 0, 4, step, "train")[0]) for step in range(20)]
    cycled = [int(length_budgets(gen, seed, 0, 4, step, "train", cycle=5)[0]) for step in range(20)]
    assert cycled[:5] == plain[:5] and cycled == cycled[:5] * 4
    assert plain != plain[:5] * 4
    # evaluation draws are never cycled
    assert torch.equal(length_budgets(gen, seed, 0, 4, 7, "eval", cycle=5), length_budgets(gen, seed, 0, 4, 7, "eval"))


def test_dropout_acts_from_the_first_update_as_in_trl(make_config, tmp_path):
    config = make_config(agents__dropout="trl")
    agent = build_agents(config)[0]
    for module in agent.policy.lm.modules():  # the tiny model ships without dropout: give it some
        if hasattr(module, "attention_dropout"):
            module.attention_dropout = 0.5
    prompts = ["abc", "de", "f", "gh"] * 2

    def logprobs(phase):
        torch.manual_seed(0)
        first = agent.generate(GenerateRequest(prompts, step=3, phase=phase, keep=False))
        torch.manual_seed(1)
        second = agent.generate(GenerateRequest(prompts, step=3, phase=phase, keep=False))
        return first.kl, second.kl

    before = logprobs("train")
    assert before[0] == before[1] and not agent.policy.lm.training  # no dropout before the first update
    agent.generate(GenerateRequest(prompts, step=0))
    agent.update([1.0, 0.0] * 4, step=0)
    assert agent.policy.lm.training
    after = logprobs("train")
    assert after[0] != after[1]  # dropout draws from the global generator
    evaluated = logprobs("eval")
    assert evaluated[0] == evaluated[1] and not agent.policy.lm.training  # evaluation never
    meta = agent.write_state(tmp_path)
    assert meta["dropout_active"]
    agent.reset_learning_state()  # a rebuilt trainer starts in eval mode again
    assert not agent.learner.dropout_active
    agent.read_state(tmp_path, meta)
    assert agent.learner.dropout_active


def test_evaluation_budgets_cover_every_length_and_ignore_the_run_seed(make_config):
    from collections import Counter

    from cory.evaluation import evaluation_budgets

    config = make_config(generation__max_new_tokens=15, generation__length_sampler=[4, 15])
    budgets = evaluation_budgets(config, 256)
    counts = Counter(budgets)
    assert sorted(counts) == list(range(4, 16)) and max(counts.values()) - min(counts.values()) <= 1
    assert budgets == evaluation_budgets(make_config(seed=7, generation__max_new_tokens=15,
                                                     generation__length_sampler=[4, 15]), 256)
    assert budgets != evaluation_budgets(make_config(eval__seed=99, generation__max_new_tokens=15,
                                                     generation__length_sampler=[4, 15]), 256)
    assert evaluation_budgets(make_config(generation__length_sampler=[4, 6], eval__lengths="training"), 8) is None
    assert evaluation_budgets(make_config(), 8) is None  # no length sampler: the fixed budget


def test_evaluation_answers_every_row_within_its_budget(make_config):
    from cory.evaluation import evaluation_budgets

    config = make_config(method="cory", generation__max_new_tokens=8, generation__length_sampler=[2, 8],
                         generation__length_sampler_per="batch", generation__min_new_tokens=8,
                         eval__n_prompts=8)
    trainer = run_trainer(config)
    samples = [r for r in trainer.rows if "eval/solo/response_length" in r]
    budgets = evaluation_budgets(config, 8)
    assert samples and samples[0]["eval/solo/response_length"] == pytest.approx(sum(budgets) / 8)


def test_responses_keep_special_tokens_when_asked(make_config):
    config = make_config(generation__max_new_tokens=12)
    agent = build_agents(config)[0]
    eos = agent.stop_ids[0]
    reply = agent.generate(GenerateRequest(["abc"] * 64, step=0, keep=False))
    stopped = [i for i, (n, limit) in enumerate(zip(reply.lengths, reply.hit_length_limit)) if not limit]
    assert stopped, "no response ended at EOS; raise the sample"
    eos_text = agent.tokenizer.decode([eos])
    assert not any(eos_text in reply.texts[i] for i in stopped)
    config.generation.skip_special_tokens = False
    kept = agent.generate(GenerateRequest(["abc"] * 64, step=0, keep=False))
    assert all(kept.texts[i].endswith(eos_text) for i in stopped)


# ---------------------------------------------------------------- the update
def hand_batch(logprobs, old_logprobs, advantages):
    shape = logprobs.shape
    zeros = torch.zeros(shape)
    batch = MiniBatch(torch.zeros(shape[0], 1, dtype=torch.long), torch.ones(shape[0], 1, dtype=torch.long),
                      torch.zeros(shape, dtype=torch.long), torch.ones(shape, dtype=torch.long),
                      old_logprobs, zeros, advantages, zeros, old_logprobs, old_logprobs)
    out = PolicyOutput(logprobs.requires_grad_(), zeros, None, zeros)
    return out, batch


@pytest.mark.parametrize("threshold, guarded", [(None, False), (10.0, True), (30.0, False)])
def test_ratio_guard_zeroes_a_minibatch_whose_mean_ratio_exceeds_the_threshold(threshold, guarded):
    out, batch = hand_batch(torch.full((2, 3), math.log(20.0)), torch.zeros(2, 3), -torch.ones(2, 3))
    loss, stats = minibatch_loss(objective_of(AlgorithmConfig(name="ppo"), PPOConfig(ratio_threshold=threshold)), out, batch)
    loss.backward()
    assert stats["ratio"].item() == pytest.approx(20.0)
    assert stats["ratio_guarded"].item() == float(guarded)
    assert (loss.item() == 0.0) == guarded
    assert (out.logprobs.grad.abs().sum().item() == 0.0) == guarded


@pytest.mark.parametrize("estimator", ["abs", "full"])
def test_kl_controller_sees_the_configured_estimator(make_config, estimator):
    config = make_config(ppo__kl_penalty=estimator, ppo__adap_kl_ctrl=True, ppo__init_kl_coef=0.2,
                         ppo__target=1e-3, ppo__horizon=100.0)
    agent = build_agents(config)[0]
    agent.generate(GenerateRequest(["abc", "de", "f", "gh"] * 2, step=0))
    rollout = agent.held.rollouts[0]
    mask = rollout.response_mask.float()
    log_ratio = ((rollout.logprobs - rollout.ref_logprobs) * mask).sum(-1).mean().item()
    if estimator == "abs":
        expected_input = ((rollout.logprobs - rollout.ref_logprobs).abs() * mask).sum(-1).mean().item()
    else:  # the exact KL from both models' full distributions, recomputed here
        with torch.no_grad():
            mine = agent.policy(rollout.query_ids, rollout.query_mask, rollout.response_ids,
                                rollout.response_mask, with_entropy=False).logits.log_softmax(-1)
            ref = agent.reference.score(rollout.query_ids, rollout.query_mask, rollout.response_ids,
                                        rollout.response_mask).logits.float().log_softmax(-1)
        expected_input = ((mine.exp() * (mine - ref)).sum(-1) * mask).sum(-1).mean().item()
    stats = agent.update([1.0] * 8, step=0)
    assert stats["kl"] == pytest.approx(log_ratio, abs=1e-6)
    assert stats["kl_controller_input"] == pytest.approx(expected_input, rel=1e-4, abs=1e-6)
    error = min(max(expected_input / 1e-3 - 1, -0.2), 0.2)
    assert agent.learner.kl_ctl.value == pytest.approx(0.2 * (1 + error * 8 / 100.0), rel=1e-6)


def test_reinforce_in_the_authors_form_uses_trl_gae_returns_unwhitened():
    mask = torch.ones(1, 2)
    rollout = Rollout(torch.zeros(1, 1, dtype=torch.long), torch.ones(1, 1, dtype=torch.long),
                      torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2, dtype=torch.long),
                      torch.zeros(1, 2), torch.tensor([[0.5, 0.2]]), torch.zeros(1, 2), torch.zeros(1, 2),
                      torch.zeros(1, 2))
    authors = AlgorithmConfig(name="reinforce_clip", returns="trl_gae", whiten_returns=False)
    targets = compute_targets(objective_of(authors, PPOConfig(gamma=1.0, lam=0.95)), rollout, torch.tensor([1.0]), 0.0, None)
    # GAE by hand: delta_1 = 1 - 0.2 = 0.8; delta_0 = 0.2 - 0.5 = -0.3; A_0 = -0.3 + 0.95 * 0.8
    assert targets.returns[0].tolist() == pytest.approx([0.46 + 0.5, 0.8 + 0.2])
    assert torch.equal(targets.advantages, targets.returns * mask)
    discounted = compute_targets(objective_of(AlgorithmConfig(name="reinforce_clip"), PPOConfig()), rollout,
                                 torch.tensor([1.0]), 0.0, None)
    assert discounted.returns.tolist() == [[1.0, 1.0]]
    whitened = compute_targets(objective_of(AlgorithmConfig(name="reinforce_clip", whiten_returns=True), PPOConfig()),
                               rollout, torch.tensor([1.0, 1.0])[:1], 0.0, None)
    assert whitened.advantages.sum().item() == pytest.approx(0.0, abs=1e-6)


def test_the_reinforce_method_is_the_authors_form(make_config):
    config = make_config(method="reinforce")
    assert (config.algorithm.returns, config.algorithm.whiten_returns) == ("trl_gae", False)
    agent = build_agents(config)[0]
    assert agent.settings.uses_values  # the returns read the (never trained) value head
    head = {k: v.clone() for k, v in agent.policy.value_head.state_dict().items()}
    agent.generate(GenerateRequest(["abc", "de", "f", "gh"] * 2, step=0))
    agent.update([1.0] * 8, step=0)
    for key, value in agent.policy.value_head.state_dict().items():
        assert torch.equal(value, head[key]), "REINFORCE trained the value head"


# ---------------------------------------------------------------- role exchange
def learning_state(agent):
    return {
        "params": {n: p.detach().clone() for n, p in agent.learner.trainable.items()},
        "head": {k: v.clone() for k, v in agent.policy.value_head.state_dict().items()},
        "scheduler": agent.learner.scheduler.state_dict(),
        "ema": {n: t.clone() for n, t in agent.learner.elastic.ema.items()},
    }


def test_reset_learning_state_resets_exactly_optimiser_kl_and_moments(make_config):
    config = make_config(method="cory", ppo__adap_kl_ctrl=True, ppo__use_score_scaling=True,
                         elastic_reset__enabled=True, ppo__lr_scheduler="linear")
    agent = build_agents(config)[0]
    agent.generate(GenerateRequest(["abc", "de", "f", "gh"] * 2, step=0))
    agent.update([1.0, 2.0] * 4, step=0)
    assert agent.learner.optimizer.state and agent.learner.kl_ctl.value != config.ppo.init_kl_coef
    assert agent.learner.moments.count > 0
    before = learning_state(agent)
    agent.reset_learning_state()
    assert not agent.learner.optimizer.state
    assert agent.learner.kl_ctl.value == config.ppo.init_kl_coef
    assert agent.learner.moments.state_dict() == type(agent.learner.moments)().state_dict()
    after = learning_state(agent)
    assert after["scheduler"] == before["scheduler"]
    for part in ("params", "head", "ema"):
        for key, tensor in before[part].items():
            assert torch.equal(tensor, after[part][key]), f"{part}.{key} changed"


@pytest.mark.parametrize("reset", [True, False])
def test_reset_on_swap_restores_the_initial_kl_coefficient_at_each_exchange(make_config, reset):
    trainer = run_trainer(make_config(method="cory", steps=3, eval_every=0, roles__swap_every=2,
                                      roles__reset_on_swap=reset, ppo__adap_kl_ctrl=True,
                                      ppo__init_kl_coef=0.05))
    rows = [r for r in trainer.rows if "agent0/kl_coef" in r]
    assert rows[1]["agent0/kl_coef"] != 0.05  # adapted after one update
    assert (rows[2]["agent0/kl_coef"] == 0.05) == reset
    assert (rows[2]["agent1/kl_coef"] == 0.05) == reset


# ---------------------------------------------------------------- Elastic Reset
@pytest.mark.parametrize("cadence", ["optimizer_step", "iteration"])
def test_elastic_reset_ema_follows_every_optimiser_step(make_config, cadence):
    decay = 0.9
    config = make_config(method="elastic_reset", elastic_reset__decay=decay, elastic_reset__ema_every=cadence,
                         elastic_reset__reset_freq=100, ppo__batch_size=8, ppo__mini_batch_size=4,
                         ppo__ppo_epochs=2)
    agent = build_agents(config)[0]
    name = next(iter(agent.learner.trainable))
    after_steps = []
    agent.learner.optimizer.register_step_post_hook(
        lambda *_: after_steps.append(agent.learner.trainable[name].detach().clone()))
    expected = agent.learner.elastic.ema[name].clone()
    agent.generate(GenerateRequest(["abc", "de", "f", "gh"] * 2, step=0))
    agent.update([1.0, 0.0] * 4, step=0)
    assert len(after_steps) == 4  # 2 epochs x 2 mini-batches
    for online in after_steps if cadence == "optimizer_step" else after_steps[-1:]:
        expected = decay * expected + (1 - decay) * online
    assert torch.allclose(agent.learner.elastic.ema[name], expected, atol=1e-7)


# ---------------------------------------------------------------- shipped configs
AUTHORS = ["ppo", "cory", "cory_ppo_keys", "reinforce", "elastic_reset"]


@pytest.mark.parametrize("name", AUTHORS)
def test_authors_configs_resolve_with_the_released_settings(name):
    config = load_config(f"configs/imdb/authors/{name}.yaml")
    # ppo.py (and the PPO-based baselines) train gpt2-medium with seed 123; cory.py two gpt2, seed 0
    medium = name in ("ppo", "reinforce", "elastic_reset")
    assert (config.model, config.seed) == (("openai-community/gpt2-medium", 123) if medium else ("openai-community/gpt2", 0))
    assert (config.task.source, config.reward.model) == ("stanfordnlp/imdb", "lvwerra/distilbert-imdb")
    # 97 batches of 256 (drop_last) before `epoch > 100` could stop the loop
    assert (config.ppo.batch_size, config.ppo.mini_batch_size, config.ppo.ppo_epochs, config.steps) == (256, 256, 4, 97)
    assert (config.ppo.kl_penalty, config.ppo.ratio_threshold, config.ppo.learning_rate) == ("full", 10.0, 1.41e-5)
    gen = config.generation
    assert (gen.length_sampler, gen.length_sampler_per, gen.min_new_tokens, gen.repetition_penalty) == (
        [4, 15], "batch", 0, 1.1)
    assert not gen.skip_special_tokens and gen.penalise_padding and config.agents.dropout == "trl"
    assert (config.task.query_min_tokens, config.task.query_max_tokens) == (2, 7)


def test_authors_cory_and_ppo_differ_as_the_released_scripts_do():
    cory = load_config("configs/imdb/authors/cory.yaml")
    ppo = load_config("configs/imdb/authors/ppo.yaml")
    matched = load_config("configs/imdb/authors/cory_ppo_keys.yaml")
    assert (cory.ppo.init_kl_coef, cory.ppo.use_score_scaling, cory.ppo.use_score_norm) == (0.4, True, True)
    assert (ppo.ppo.init_kl_coef, ppo.ppo.use_score_scaling, ppo.ppo.use_score_norm) == (0.3, False, False)
    assert cory.roles.reset_on_swap and cory.roles.swap_every == 5 and cory.collective.lambda_ == 1.0
    assert cory.roles.repeat_lengths_after_swap and not ppo.roles.repeat_lengths_after_swap
    assert (matched.ppo.init_kl_coef, matched.ppo.use_score_scaling) == (0.3, False)


@pytest.mark.parametrize("name", ["ppo", "cory", "reinforce", "elastic_reset"])
def test_cpu_configs_differ_from_the_authors_only_in_scale_keys(name):
    from cory.config.tree import to_dict
    from cory.rundir import config_differences

    scale = {"model", "reward", "task", "ppo", "steps", "threads", "eval_every", "eval", "output_dir",
             "save_every", "keep_last"}
    ours = to_dict(load_config(f"configs/imdb/{name}.yaml"))
    theirs = to_dict(load_config(f"configs/imdb/authors/{name}.yaml"))
    differences = {d.split(":")[0] for d in config_differences(theirs, ours, [])}
    allowed = {"model", "seed", "reward.name", "reward.model", "task.source", "task.min_review_chars", "task.n_test",
               "ppo.batch_size", "ppo.mini_batch_size", "ppo.learning_rate", "steps", "threads",
               "eval_every", "eval.n_prompts", "output_dir", "save_every", "keep_last"}
    assert differences <= allowed, differences - allowed
    assert {d.split(".")[0] for d in differences} <= scale


def test_authors_cory_runs_with_tiny_overrides(tmp_path):
    reviews = tmp_path / "reviews.txt"
    reviews.write_text("\n".join(f"review {i}: " + "a fine film with a plot and some actors " * 3
                                 for i in range(40)), encoding="utf-8")
    config = load_config("configs/imdb/authors/cory.yaml", [
        "model=tiny-random", f"task.source={reviews}", "task.n_test=8", "reward.name=vader",
        "ppo.batch_size=4", "ppo.mini_batch_size=4", "steps=2", "eval_every=0", "eval.n_prompts=4",
        f"output_dir={tmp_path / 'run'}", "threads=1", "log.tensorboard=false", "log.progress=false"])
    trainer = run_trainer(config)
    rows = [r for r in trainer.rows if "agent0/kl_controller_input" in r]
    assert len(rows) == 2 and all(math.isfinite(r["agent0/kl_controller_input"]) for r in rows)
    assert isinstance(trainer, Trainer)
