"""What each per-agent algorithm is, in one place: the facts the config checks, the trainer,
the agent and the losses read (torch-free, so that config validation needs no torch).

The maths itself lives beside: ``cory.agents.objectives`` computes each algorithm's targets
and mini-batch loss from the entry found here.
"""

from __future__ import annotations

from dataclasses import dataclass

# The ``ppo:`` section holds TRL's PPOConfig, the settings every algorithm shares (learning
# rate, batches, epochs, KL control, score transforms); ``ignores`` lists those it never reads.
_VALUE_LOSS_KEYS = frozenset({"vf_coef", "cliprange_value", "whiten_advantages"})


@dataclass(frozen=True)
class Algorithm:
    name: str
    value_loss: bool           # trains the value head (PPO's clipped value loss)
    clipped: bool              # PPO's clipped ratio; False: a plain policy gradient
    grouped: bool              # several samples per prompt (algorithm.group_size), a group baseline
    moving_baseline: bool      # keeps a moving-average baseline of the returns
    ignores: frozenset[str]    # ppo: keys it never reads

    def samples_per_prompt(self, group_size: int) -> int:
        """Responses drawn per training prompt."""
        return group_size if self.grouped else 1


ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in (
    Algorithm("ppo", value_loss=True, clipped=True, grouped=False, moving_baseline=False, ignores=frozenset()),
    # the CORY authors' REINFORCE: PPO-clip on returns used as advantages, no value loss
    Algorithm("reinforce_clip", value_loss=False, clipped=True, grouped=False, moving_baseline=False,
              ignores=_VALUE_LOSS_KEYS),
    # classic REINFORCE: returns minus a moving-average baseline, no clipping
    Algorithm("reinforce", value_loss=False, clipped=False, grouped=False, moving_baseline=True,
              ignores=_VALUE_LOSS_KEYS | {"cliprange", "lam"}),
    # sequence-level group baselines (several samples per prompt), PPO-clip
    Algorithm("rloo", value_loss=False, clipped=True, grouped=True, moving_baseline=False,
              ignores=_VALUE_LOSS_KEYS | {"whiten_rewards", "gamma", "lam"}),
    Algorithm("grpo", value_loss=False, clipped=True, grouped=True, moving_baseline=False,
              ignores=_VALUE_LOSS_KEYS | {"whiten_rewards", "gamma", "lam"}),
)}


def algorithm_named(name: str) -> Algorithm:
    """The registry entry of ``algorithm.name``."""
    return ALGORITHMS[name]
