"""The sampler and PPO settings the throughput figures in docs/performance.md were measured
with, before configs/imdb/ switched to the CORY authors' protocol (docs/fidelity.md).

Benchmarks pass them as overrides so that their figures keep measuring the same work: the
sampled-log-ratio KL penalty (the fused fast path; ``full`` needs both models' whole
distributions), a fixed token budget, no repetition penalty, TRL's default KL coefficient,
raw scores and the clean role exchange.
"""

THROUGHPUT_SETTINGS = [
    "ppo.kl_penalty=kl", "ppo.init_kl_coef=0.2", "ppo.use_score_scaling=false", "ppo.use_score_norm=false",
    "ppo.ratio_threshold=null", "ppo.learning_rate=1.41e-5", "generation.length_sampler=null",
    "generation.repetition_penalty=1.0", "generation.skip_special_tokens=true", "roles.reset_on_swap=false",
    "task.query_max_tokens=8",
]
