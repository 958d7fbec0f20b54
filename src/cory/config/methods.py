"""Method presets: the config values that make a method, applied below the user's config.

Resolution order, later wins: dataclass defaults < preset of ``method`` < YAML < CLI.
Every method is the same trainer loop; a preset only picks the topology, the reward
mixing and the per-agent algorithm.
"""

from __future__ import annotations

from typing import Any

METHOD_PRESETS: dict[str, dict[str, Any]] = {
    # Single-agent PPO (TRL semantics).
    "ppo": {"topology": {"name": "single"}, "algorithm": {"name": "ppo"}},
    # CORY: pioneer -> observer, collective reward with lambda = 1, roles swap every 5.
    "cory": {
        "topology": {"name": "pioneer_observer"},
        "collective": {"lambda": 1.0},
        "roles": {"swap_every": 5},
        "algorithm": {"name": "ppo"},
    },
    # REINFORCE as in the CORY authors' TRL fork: PPO-clip with TRL's GAE returns (of a
    # value head that is never trained) as advantages, not whitened, no value loss.
    "reinforce": {"topology": {"name": "single"},
                  "algorithm": {"name": "reinforce_clip", "returns": "trl_gae", "whiten_returns": False}},
    # Classic REINFORCE with a moving-average baseline.
    "reinforce_baseline": {"topology": {"name": "single"}, "algorithm": {"name": "reinforce"}},
    # Group baselines: several samples per prompt.
    "rloo": {"topology": {"name": "single"}, "algorithm": {"name": "rloo"}},
    "grpo": {"topology": {"name": "single"}, "algorithm": {"name": "grpo"}},
    # GRPO at the defaults of TRL's GRPOTrainer today: DAPO's token mean over the optimiser
    # step, no KL anywhere (beta 0 and none in the reward), rewards scaled by the group's std,
    # 8 samples per prompt, one pass over each batch, temperature 1, learning rate 1e-6.
    "grpo_trl": {
        "topology": {"name": "single"},
        "algorithm": {"name": "grpo", "group_size": 8, "loss_type": "dapo", "beta": 0.0, "scale_rewards": "group"},
        "ppo": {"init_kl_coef": 0.0, "adap_kl_ctrl": False, "ppo_epochs": 1, "cliprange": 0.2,
                "learning_rate": 1e-6, "share_prompts": True},
        "generation": {"temperature": 1.0},
    },
    # Elastic Reset (Noukhovitch et al., 2023), with the CORY rebuttal's setting.
    "elastic_reset": {
        "topology": {"name": "single"},
        "algorithm": {"name": "ppo"},
        "elastic_reset": {"enabled": True, "decay": 0.995, "reset_freq": 17, "ema_every": "optimizer_step"},
        "ppo": {"init_kl_coef": 0.001},
    },
    # MoE baseline: two independent PPO agents; the system keeps the higher-value answer.
    "moe": {
        "topology": {"name": "independent", "n_agents": 2, "answer": "value"},
        "collective": {"lambda": 0.0},
        "roles": {"swap_every": None},
        "algorithm": {"name": "ppo"},
    },
    # CORY generalised to a chain of three agents.
    "cory_chain": {
        "topology": {"name": "chain", "n_agents": 3},
        "collective": {"lambda": 1.0},
        "roles": {"swap_every": 5},
        "algorithm": {"name": "ppo"},
    },
    # Critique and revise: CORY's pair over two rounds; in the second the pioneer revises
    # after seeing both first answers, then the observer answers last (the system's answer).
    "refine": {
        "topology": {"name": "pioneer_observer", "rounds": 2},
        "collective": {"lambda": 1.0},
        "roles": {"swap_every": 5},
        "algorithm": {"name": "ppo"},
    },
    # Debate: three agents answer on their own, then each sees every first answer and answers
    # again; cooperative reward (a vote over the last round suits exact-answer tasks).
    "debate": {
        "topology": {"name": "independent", "n_agents": 3, "rounds": 2},
        "collective": {"lambda": 1.0},
        "roles": {"swap_every": None},
        "algorithm": {"name": "ppo"},
    },
}

METHODS: tuple[str, ...] = tuple(METHOD_PRESETS)
