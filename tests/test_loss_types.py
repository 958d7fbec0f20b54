"""TRL's loss types and the KL loss term, checked as a reviewer of an RL library checks them
first: each sequence's weight on a constructed 10- and 1,000-token batch, the KL estimators
against hand-computed values and gradients, and one optimiser step's gradient whether its batch
runs whole or as micro-batches of unequal lengths (TRL 0.7's per-mini-batch token mean, kept
as the default, is shown to fail that last check)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from cory.agents.factory import build_agents
from cory.agents.minibatch_steps import MinibatchSteps
from cory.algorithms.loss_reduction import StepSize, kl_loss_term, step_part
from cory.algorithms.objective import compute_targets
from cory.config.loading import resolve
from cory.errors import ConfigError
from cory.types import GenerateRequest


LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo"]


@pytest.mark.parametrize(("loss_type", "short_weight", "long_weight"), [
    ("grpo", 0.5, 0.5),                  # each sequence's token mean, then the mean over sequences
    ("bnpo", 10 / 1010, 1000 / 1010),    # every token alike
    ("dapo", 10 / 1010, 1000 / 1010),
    ("dr_grpo", 10 / 2000, 1000 / 2000),  # tokens / (2 sequences x 1,000 max new tokens)
])
def test_a_10_and_a_1000_token_answer_get_the_documented_weights(loss_type, short_weight, long_weight):
    mask = torch.zeros(2, 1000)
    mask[0, :10], mask[1, :] = 1.0, 1.0
    per_token = torch.ones(2, 1000, requires_grad=True)
    step = StepSize(tokens=1010, sequences=2, all_tokens=1010, all_sequences=2)
    step_part(per_token, mask, loss_type, step, max_new_tokens=1000).backward()
    weights = per_token.grad.sum(-1)
    assert weights[0].item() == pytest.approx(short_weight, rel=1e-6)
    assert weights[1].item() == pytest.approx(long_weight, rel=1e-6)


def test_the_kl_estimators_match_hand_computed_values_and_gradients():
    """d = log 0.5 - log 0.25 = ln 2: k1 = ln 2, k2 = (ln 2)^2 / 2, k3 = 1/2 + ln 2 - 1; their
    derivatives in log p are 1, ln 2 and 1 - exp(-d) = 1/2."""
    ln2 = math.log(2.0)
    expected = {"k1": (ln2, 1.0), "k2": (ln2 ** 2 / 2, ln2), "k3": (0.5 + ln2 - 1.0, 0.5)}
    for estimator, (value, gradient) in expected.items():
        logprobs = torch.tensor([math.log(0.5)], requires_grad=True)
        kl = kl_loss_term(logprobs, torch.tensor([math.log(0.25)]), estimator)
        kl.sum().backward()
        assert kl.item() == pytest.approx(value, rel=1e-6), estimator
        assert logprobs.grad.item() == pytest.approx(gradient, rel=1e-6), estimator
    same = torch.tensor([-1.3])
    assert [kl_loss_term(same, same, e).item() for e in ("k1", "k2", "k3")] == [0.0, 0.0, 0.0]


def _step_gradients(tmp_path, loss_type, groups, beta=0.0):
    """One optimiser step of a tiny GRPO agent over 8 rows of unequal lengths (1..8 tokens),
    processed as ``groups`` (lists of row indices, one per micro-batch); its gradient."""
    config = resolve({"model": "tiny-random", "device": "cpu", "seed": 0, "method": "grpo", "threads": 1,
                      "output_dir": str(tmp_path), "task": {"name": "toy"},
                      "generation": {"max_new_tokens": 8, "min_new_tokens": 8},
                      "algorithm": {"group_size": 2, "loss_type": loss_type, "beta": beta},
                      "ppo": {"batch_size": 8, "mini_batch_size": 8}})
    (agent,) = build_agents(config)
    agent.generate(GenerateRequest([f"prompt {i}" for i in range(4) for _ in range(2)], step=0))
    rollout = agent.held.rollouts[0]
    lengths = torch.arange(1, 9)
    rollout.response_mask = (torch.arange(rollout.response_mask.shape[1])[None, :] < lengths[:, None]).long()
    scores = torch.linspace(-1.0, 1.0, 8)
    targets = compute_targets(agent.settings.objective, rollout, scores, 0.0, None)
    state = copy.deepcopy(agent.policy.state_dict())
    steps = MinibatchSteps(agent.index, agent.scorer, agent.learner, agent.settings, None, agent.device)
    gradients = []
    for group in groups:
        agent.policy.load_state_dict(state)
        assert steps.take(rollout, targets, [torch.tensor(rows) for rows in group]) is not None
        gradients.append(torch.cat([p.grad.flatten() for p in agent.policy.parameters() if p.grad is not None]))
    return gradients


WHOLE = [[0, 1, 2, 3, 4, 5, 6, 7]]
UNEQUAL = [[7, 0], [1, 2, 3], [6], [4, 5]]  # four micro-batches of unequal sizes and lengths


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_one_steps_gradient_is_the_same_whole_or_in_micro_batches(tmp_path, loss_type):
    whole, split = _step_gradients(tmp_path, loss_type, [WHOLE, UNEQUAL], beta=0.05)
    assert (whole - split).norm() <= 1e-6 * whole.norm(), (whole - split).norm() / whole.norm()


def test_the_per_mini_batch_token_mean_of_trl_0_7_is_not_micro_batch_invariant(tmp_path):
    """The default (loss_type: null) weighs every accumulated mini-batch alike, whatever its
    tokens: the check above catches it, so the check can fail."""
    whole, split = _step_gradients(tmp_path, None, [WHOLE, UNEQUAL])
    assert (whole - split).norm() > 1e-3 * whole.norm()


@pytest.mark.parametrize(("overrides", "message"), [
    ({"method": "ppo", "algorithm": {"loss_type": "dapo"}}, "algorithm.loss_type: dapo reduces the policy loss"),
    ({"method": "grpo", "algorithm": {"loss_type": "dr_grpo"}, "generation": {"length_sampler": [2, 6]}},
     "algorithm.loss_type: dr_grpo divides by sequences x generation.max_new_tokens"),
    ({"method": "grpo", "algorithm": {"loss_type": "token"}}, "algorithm.loss_type"),
    ({"method": "grpo", "algorithm": {"kl_estimator": "k4"}}, "algorithm.kl_estimator"),
])
def test_loss_type_combinations_that_cannot_hold_name_the_keys(overrides, message):
    with pytest.raises(ConfigError, match=message):
        resolve({"model": "tiny-random", "task": {"name": "toy"}, **overrides})


def test_clip_higher_raises_only_the_upper_clip():
    from cory.algorithms.ppo import clipped_policy_loss

    old, mask = torch.zeros(1, 2), torch.ones(1, 2)
    new = torch.log(torch.tensor([[1.3, 0.7]]))  # ratios 1.3 and 0.7
    advantages = torch.tensor([[1.0, -1.0]])
    symmetric = clipped_policy_loss(new, old, advantages, mask, cliprange=0.2)
    higher = clipped_policy_loss(new, old, advantages, mask, cliprange=0.2, cliprange_high=0.28)
    # A > 0 is clipped at 1 + eps_high; A < 0 at 1 - eps (max of -A r and -A clip(r) = 0.8 both ways)
    assert symmetric.per_token.tolist()[0] == pytest.approx([-1.2, 0.8])
    assert higher.per_token.tolist()[0] == pytest.approx([-1.28, 0.8])


def test_two_sided_clipping_caps_the_ratio_of_negative_advantages_at_delta():
    from cory.algorithms.ppo import clipped_policy_loss

    old, mask = torch.zeros(1, 2), torch.ones(1, 2)
    new = torch.log(torch.tensor([[3.0, 3.0]]))  # both ratios 3
    advantages = torch.tensor([[-1.0, 1.0]])
    plain = clipped_policy_loss(new, old, advantages, mask, cliprange=0.2)
    capped = clipped_policy_loss(new, old, advantages, mask, cliprange=0.2, delta=2.0)
    # A < 0: max(-A r, -A clip(r)) = max(3, 1.2) = 3, with delta max(2, 1.2) = 2; A > 0: clipped either way
    assert plain.per_token.tolist()[0] == pytest.approx([3.0, -1.2])
    assert capped.per_token.tolist()[0] == pytest.approx([2.0, -1.2])
    with pytest.raises(ConfigError, match="algorithm.delta: 1.1 caps the unclipped ratio at or below the upper clip"):
        resolve({"model": "tiny-random", "task": {"name": "toy"}, "algorithm": {"name": "grpo", "delta": 1.1}})


def test_scale_rewards_divides_by_the_groups_std_the_batchs_or_nothing():
    """Rewards [1, 0 | 3, 1]: distances from the group means [0.5, -0.5, 1, -1]; group stds
    (unbiased) 0.7071 and 1.4142; the batch's std sqrt(4.75 / 3) = 1.2583."""
    from cory.algorithms.reinforce import group_normalised_advantages

    rewards = torch.tensor([1.0, 0.0, 3.0, 1.0])
    by = {scale: group_normalised_advantages(rewards, 2, eps=0.0, scale=scale).tolist()
          for scale in ("group", "batch", "none")}
    assert by["group"] == pytest.approx([0.70711, -0.70711, 0.70711, -0.70711], rel=1e-4)
    assert by["batch"] == pytest.approx([0.39736, -0.39736, 0.79472, -0.79472], rel=1e-4)
    assert by["none"] == pytest.approx([0.5, -0.5, 1.0, -1.0])


def test_a_sequence_level_ratio_gives_every_token_its_rows_mean_log_ratio():
    """GSPO: log-ratios 0.1 and 0.3 in a row (the third token is padding) make one ratio
    exp(0.2) for both; clipped at 1.2 for a positive advantage."""
    from cory.algorithms.ppo import clipped_policy_loss

    old = torch.zeros(1, 3)
    new = torch.tensor([[0.1, 0.3, 5.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss = clipped_policy_loss(new, old, torch.ones(1, 3), mask, cliprange=0.5, sequence_ratio=True)
    assert loss.per_token[0, :2].tolist() == pytest.approx([-math.exp(0.2)] * 2)
    assert loss.ratio_mean.item() == pytest.approx(math.exp(0.2))
    loss.loss.backward()  # d(-exp(mean))/d(log p_t) = -exp(0.2) / 2 for each real token, 0 for padding
    assert new.grad[0].tolist() == pytest.approx([-math.exp(0.2) / 2, -math.exp(0.2) / 2, 0.0])
    clipped = clipped_policy_loss(new, old, torch.ones(1, 3), mask, cliprange=0.1, sequence_ratio=True)
    assert clipped.per_token[0, :2].tolist() == pytest.approx([-1.1, -1.1])


def test_mask_truncated_leaves_responses_that_hit_the_length_limit_out_of_the_loss(tmp_path):
    """Every response is cut by the limit (min_new_tokens = max_new_tokens): with the option
    the update's step sees no token, so nothing moves; without it the same update does."""
    def update_moves(mask_truncated: bool) -> bool:
        config = resolve({"model": "tiny-random", "device": "cpu", "seed": 0, "method": "grpo", "threads": 1,
                          "output_dir": str(tmp_path), "task": {"name": "toy"},
                          "generation": {"max_new_tokens": 4, "min_new_tokens": 4},
                          "algorithm": {"group_size": 2, "loss_type": "dapo", "mask_truncated": mask_truncated},
                          "ppo": {"batch_size": 4, "mini_batch_size": 4, "ppo_epochs": 1, "learning_rate": 1e-2}})
        (agent,) = build_agents(config)
        agent.generate(GenerateRequest([f"prompt {i}" for i in range(2) for _ in range(2)], step=0))
        assert agent.held.rollouts[0].truncated.all()
        before = [p.detach().clone() for p in agent.policy.parameters()]
        agent.update([0.0, 1.0, 0.0, 1.0], step=0)
        return any(not torch.equal(a, p) for a, p in zip(before, agent.policy.parameters()))

    assert update_moves(False) and not update_moves(True)


@pytest.mark.parametrize("logprobs", ["model", "sampler"])
def test_at_the_first_mini_batch_the_ratio_is_one_and_the_scorer_repeats_the_samplers_logprobs(tmp_path, logprobs):
    """Sampled at temperature 0.7 with top-k 20 and top-p 0.9 (hf engine): the log-probs the
    update recomputes equal those the sampler recorded to 1e-5, under either meaning of
    ``generation.logprobs``, and the first mini-batch's policy/old ratio is 1."""
    config = resolve({"model": "tiny-random", "device": "cpu", "seed": 0, "method": "grpo", "threads": 1,
                      "output_dir": str(tmp_path), "task": {"name": "toy"},
                      "generation": {"max_new_tokens": 8, "temperature": 0.7, "top_k": 20, "top_p": 0.9,
                                     "logprobs": logprobs},
                      "algorithm": {"group_size": 2},
                      "ppo": {"batch_size": 8, "mini_batch_size": 8, "ppo_epochs": 1}})
    (agent,) = build_agents(config)
    agent.generate(GenerateRequest([f"prompt {i}" for i in range(4) for _ in range(2)], step=0))
    rollout = agent.held.rollouts[0]
    mask = rollout.response_mask.bool()
    assert torch.allclose(rollout.sampler_logprobs[mask], rollout.logprobs[mask], atol=1e-5)
    stats = agent.update([float(i % 2) for i in range(8)], step=0)  # one mini-batch: the ratio before any step
    assert stats["ratio"] == pytest.approx(1.0, abs=1e-6)


def test_the_model_and_the_sampler_logprobs_differ_under_filters(tmp_path):
    """The check above can fail: with top-k/top-p on, the model's log-probs (TRL's meaning) are
    not those of the distribution the tokens were drawn from (renormalised over fewer tokens)."""
    def sampled(logprobs):
        config = resolve({"model": "tiny-random", "device": "cpu", "seed": 0, "method": "grpo", "threads": 1,
                          "output_dir": str(tmp_path / logprobs), "task": {"name": "toy"},
                          "generation": {"max_new_tokens": 8, "temperature": 0.7, "top_k": 20, "top_p": 0.9,
                                         "logprobs": logprobs},
                          "algorithm": {"group_size": 2}, "ppo": {"batch_size": 8, "mini_batch_size": 8}})
        (agent,) = build_agents(config)
        agent.generate(GenerateRequest([f"prompt {i}" for i in range(4) for _ in range(2)], step=0))
        return agent.held.rollouts[0]
    model, sampler = sampled("model"), sampled("sampler")
    assert torch.equal(model.response_ids, sampler.response_ids)  # the same draws
    mask = model.response_mask.bool()
    gap = (sampler.sampler_logprobs - model.sampler_logprobs)[mask]
    assert (gap >= -1e-6).all() and gap.max() > 1e-3  # renormalised over fewer tokens: never less likely
    with pytest.raises(ConfigError, match="generation.logprobs: sampler recomputes .* generation.repetition_penalty"):
        resolve({"model": "tiny-random", "task": {"name": "toy"},
                 "generation": {"logprobs": "sampler", "repetition_penalty": 1.2}})
