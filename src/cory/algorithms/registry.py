"""Every per-agent algorithm, in one place: its name, how it turns rewards into advantages,
and which losses and ``ppo:`` keys it uses. The config's choices, its checks, the trainer,
the agent and the losses all read these entries; no other module names an algorithm.

Torch-free, so that reading and checking a config needs no torch; the maths each entry
names is in ``cory.algorithms.objective``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

AlgorithmName = Literal["ppo", "reinforce_clip", "reinforce", "rloo", "grpo"]

# How an algorithm turns per-token rewards into advantages:
#   gae                     GAE over the value head (PPO)
#   returns                 the returns themselves (the CORY authors' REINFORCE; algorithm.returns
#                           picks discounted reward-to-go or TRL's GAE returns of an untrained head)
#   returns_minus_baseline  returns minus a moving average of past sequence returns
#   leave_one_out           sequence reward minus the mean of the prompt's other samples (RLOO)
#   group_normalised        sequence reward minus the group mean, over the group std (GRPO)
Advantage = Literal["gae", "returns", "returns_minus_baseline", "leave_one_out", "group_normalised"]

# The ``ppo:`` section holds TRL's PPOConfig, the settings every algorithm shares (learning
# rate, batches, epochs, KL control, score transforms); ``ignores`` lists those it never reads.
_VALUE_LOSS_KEYS = frozenset({"vf_coef", "cliprange_value", "whiten_advantages"})


@dataclass(frozen=True)
class Algorithm:
    name: AlgorithmName
    advantage: Advantage
    value_loss: bool           # trains the value head (PPO's clipped value loss)
    clipped: bool              # PPO's clipped ratio; False: a plain policy gradient
    ignores: frozenset[str]    # ppo: keys it never reads

    @property
    def grouped(self) -> bool:
        """Several samples per prompt (``algorithm.group_size``) and a group baseline."""
        return self.advantage in ("leave_one_out", "group_normalised")

    @property
    def moving_baseline(self) -> bool:
        """Keeps a moving-average baseline of the returns (part of its learning state)."""
        return self.advantage == "returns_minus_baseline"

    def samples_per_prompt(self, group_size: int) -> int:
        """Responses drawn per training prompt."""
        return group_size if self.grouped else 1

    def reads_values(self, returns: str) -> bool:
        """Whether its targets read the value head: GAE, or returns computed as TRL's GAE
        returns (``algorithm.returns: trl_gae``) of a head it never trains."""
        return self.advantage == "gae" or (self.advantage == "returns" and returns == "trl_gae")


ALGORITHMS: dict[AlgorithmName, Algorithm] = {a.name: a for a in (
    Algorithm("ppo", "gae", value_loss=True, clipped=True, ignores=frozenset()),
    # the CORY authors' REINFORCE: PPO-clip on returns used as advantages, no value loss
    Algorithm("reinforce_clip", "returns", value_loss=False, clipped=True, ignores=_VALUE_LOSS_KEYS),
    # classic REINFORCE: returns minus a moving-average baseline, no clipping
    Algorithm("reinforce", "returns_minus_baseline", value_loss=False, clipped=False,
              ignores=_VALUE_LOSS_KEYS | {"cliprange", "lam"}),
    # sequence-level group baselines (several samples per prompt), PPO-clip
    Algorithm("rloo", "leave_one_out", value_loss=False, clipped=True,
              ignores=_VALUE_LOSS_KEYS | {"whiten_rewards", "gamma", "lam"}),
    Algorithm("grpo", "group_normalised", value_loss=False, clipped=True,
              ignores=_VALUE_LOSS_KEYS | {"whiten_rewards", "gamma", "lam"}),
)}


def algorithm_named(name: AlgorithmName) -> Algorithm:
    """The registry entry of ``algorithm.name``."""
    return ALGORITHMS[name]
