"""THE training loop, shared by every method. One iteration:

    sample queries -> play and score the episode (multi.episode) -> update each agent on its
    turns -> summarise (multi.summary) -> log; with evaluation and checkpoints between

Single-agent PPO is one node; CORY is a pioneer -> observer chain whose role -> agent
mapping rotates every K iterations; MoE is independent nodes with a value-based answer.
The trainer only moves text and numbers; the agents hold the models.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from cory.agents.agent import Agent
from cory.agents.group import on_every_agent, read_agent_states
from cory.algorithms.registry import algorithm_named
from cory.build import build_run, prepare_process
from cory.checkpoint import Checkpoint, latest_good, load_checkpoint, save_checkpoint, save_tensors, step_dir
from cory.config.schema import RunConfig
from cory.config.tree import to_dict
from cory.errors import AgentLost, CoryError, NumericFault
from cory.evaluation import evaluate
from cory.logging import METRICS_FILE, RunLogger, read_jsonl_rows
from cory.multi.episode import Draw, play_episode
from cory.multi.layout import TurnLayout
from cory.multi.summary import TRAINING, sample_rows, summarise, summarise_updates
from cory.prompt_sampler import PromptSampler
from cory.provenance import describe_environment, record_environment, resident_memory_gb
from cory.redaction import redacted
from cory.rewards.base import RewardFunction
from cory.rewards.remote import RewardRefused, RewardUnavailable
from cory.rundir import check_resumable, export_final, log_texts, open_run_dir, restore_logs
from cory.seeding import rng_state, seed_everything, set_rng_state, torch_rng_tensors
from cory.tasks.base import Task
from cory.timing import StageTimer
from cory.trackers import TrackerSet

class Trainer:
    """Owns the loop; the agents (local or Ray actors) own the models."""

    def __init__(self, config: RunConfig, task: Task | None = None, reward: RewardFunction | None = None) -> None:
        """Prepare this process for ``config`` and build its run (``build.build_run``); a
        ``task`` or ``reward`` passed in is used as it is."""
        parts = build_run(prepare_process(config), task=task, reward=reward)
        config = self.config = parts.config
        self.run_dir = Path(config.output_dir)
        self.task, self.agents, self.reward = parts.task, parts.agents, parts.reward
        self.topology, self.roles = parts.topology, parts.roles
        algorithm = config.algorithm
        repeat = algorithm_named(algorithm.name).samples_per_prompt(algorithm.group_size)
        self.sampler = PromptSampler(self.task.train, config.ppo.batch_size // repeat, repeat, config.seed)
        self.logger: RunLogger | None = None
        self.rows: list[dict[str, Any]] = []
        self.consecutive_faults = 0

    @property
    def log(self) -> RunLogger:
        """The run's logger, open inside ``train``."""
        if self.logger is None:
            raise CoryError("the run's logger is open only inside Trainer.train()")
        return self.logger

    # ------------------------------------------------------------------ loop
    def train(self) -> dict[str, Any]:
        """Run (or resume) the whole job; returns the final evaluation metrics.

        On the Ray backend a lost agent actor is replaced and the run continues from its
        last good checkpoint (at most ``ray.max_restarts`` times).
        """
        checkpoint = open_run_dir(self.run_dir, self.config)
        step = self._restore(checkpoint) if checkpoint is not None else 0
        config = self.config
        record_environment(self.run_dir, describe_environment(
            step, torch.get_num_threads(), self.agents.devices(), config.agent_models(),
            getattr(self.reward, "source", None)))  # a reward read from a model folder has one
        self._open_logger(step)
        if checkpoint is not None:
            self.log.event(step, "resumed", checkpoint=checkpoint.step, path=str(checkpoint.path))
        try:
            while True:
                try:
                    return self._run_from(step)
                except AgentLost as lost:
                    step = self._recover(lost)
        finally:
            self.log.close()

    def _record_reward_waits(self, step: int) -> None:
        """An event row for each wait on a reward server that did not answer (remote rewards)."""
        waits = getattr(self.reward, "outages", None)
        while waits:
            self.log.event(step, "reward_wait", **waits.pop(0))

    def _open_logger(self, step: int) -> None:
        log = self.config.log
        logger = self.logger = RunLogger(self.run_dir, self.config.steps, step, log.progress)

        def report(name: str, error: str) -> None:
            logger.event(step, "tracker_failed", tracker=name, error=error)
            logger.message(f"warning: tracker '{name}' switched off ({error}); the run goes on and "
                           f"{self.run_dir / METRICS_FILE} keeps every row")

        trackers = logger.trackers = TrackerSet(
            log.trackers(), self.run_dir, redacted(to_dict(self.config)),
            log.run_name or "-".join(self.run_dir.parts[-2:]), log.project,
            [*log.tags, self.config.method], on_failure=report, timeout=log.tracker_timeout)
        trackers.catch_up(self.rows)  # after a resume: what a killed process did not deliver

    def _run_from(self, start: int) -> dict[str, Any]:
        config = self.config
        for step in range(start, config.steps):
            row: dict[str, Any] = {"step": step}
            try:
                if config.eval_every and step % config.eval_every == 0:
                    row.update(self._evaluate(step))
                row.update(self.run_iteration(step))
            except NumericFault as fault:
                row.update({"fault": 1.0, "fault_reason": str(fault)})
            except (RewardUnavailable, RewardRefused) as outage:
                self._stop_for_reward(step, outage)
            row["memory/rss_gb"] = resident_memory_gb()
            self._record_reward_waits(step)
            self._log_row(step, row)
            self._count_faults(step, row)
            if config.save_every and (step + 1) % config.save_every == 0 and step + 1 < config.steps:
                self.save(step + 1)
        if config.save_every:
            self.save(config.steps)  # before the final evaluation: a longer resume continues here
        final = self._evaluate(config.steps)
        self._log_row(config.steps, {"step": config.steps, **final})
        target = export_final(self.run_dir, self.agents, final)
        if config.log.log_model:
            kept = self.log.trackers.model(target) if self.log.trackers is not None else []
            self.log.message(f"final model uploaded to: {', '.join(kept) or 'no tracker (none keeps files)'}")
        self.log.message(f"done: metrics in {self.run_dir / METRICS_FILE}, final model(s) in {target}")
        return final

    def _stop_for_reward(self, step: int, outage: CoryError) -> None:
        """No reward for iteration ``step``: keep what was trained (a checkpoint after the
        finished iterations), say so, and stop; a resume runs iteration ``step`` again."""
        self._record_reward_waits(step)
        self.log.event(step, "reward_unavailable", reason=str(outage))
        if step > 0:
            saved = f"a checkpoint after {step} finished iteration(s) is in {self.save(step)}"
        else:
            saved = "nothing was trained yet, so no checkpoint was written"
        raise CoryError(f"no reward for iteration {step}: {outage}. The run stopped before that "
                        f"iteration ({saved}); nothing was skipped. Bring the reward back, then run the "
                        "same command with resume=auto.") from None

    def _recover(self, lost: AgentLost) -> int:
        """Replace the actors and reload the last good checkpoint; returns its step."""
        path = latest_good(self.run_dir, report=self.log.message)
        if path is None or self.agents.restarts >= self.config.ray.max_restarts:
            why = "no checkpoint to resume from (set save_every)" if path is None else "too many restarts"
            raise CoryError(f"{lost}; cannot recover: {why}") from None
        self.log.close()
        self.agents.restart()
        step = self._restore(load_checkpoint(path))
        self._open_logger(step)
        self.log.event(step, "agent_lost", reason=str(lost), resumed_from=str(path))
        return step

    def run_iteration(self, step: int) -> dict[str, Any]:
        """One training iteration: sample queries, play and score the episode, update every
        agent on its turns, summarise. Returns the iteration's metrics row."""
        config = self.config
        timer = StageTimer()
        if config.roles.reset_on_swap and self.roles.exchanges_at(step):
            on_every_agent(self.agents, Agent.reset_learning_state)
            seed_everything(config.seed)  # as TRL's PPOTrainer does when it is built
        layout = TurnLayout.of(self.topology, self.roles.agent_for_role(step))
        episode = play_episode(self.agents, layout, self.task, self.reward, self.sampler.batch(step), Draw(step),
                               credit=config.collective, timer=timer)
        with timer.stage("update"):
            stats = self.agents.map(Agent.update, {agent: (episode.rewards_of_agent(agent), step)
                                                   for agent in layout.agents()})
        row = {**summarise(episode, TRAINING, config.topology.answer, self.task.checker, per_agent=stats),
               "swaps": self.roles.swaps_before(step), **summarise_updates(stats), **timer.metrics(),
               "time/generate": sum(r.seconds["generate"] for r in episode.replies),
               "time/reference": sum(r.seconds["reference"] for r in episode.replies),
               "time/iteration": timer.elapsed()}
        if self.logger is not None and config.log.n_samples and step % config.log.samples_every == 0:
            self.logger.samples([{"step": step, "phase": "train", **sample}
                                 for sample in sample_rows(episode, config.log.n_samples)])
        return row

    def _evaluate(self, step: int) -> dict[str, Any]:
        started = time.perf_counter()
        layout = TurnLayout.of(self.topology, self.roles.agent_for_role(step))
        result = evaluate(self.agents, layout, self.task, self.reward, self.config, n_samples=self.config.log.n_samples)
        self.log.samples([{"step": step, "phase": "eval", **s} for s in result.samples])
        return {**result.metrics, "time/eval": time.perf_counter() - started}

    def _log_row(self, step: int, row: dict[str, Any]) -> None:
        self.rows.append(row)
        self.log.metrics(step, row)

    def _count_faults(self, step: int, row: dict[str, Any]) -> None:
        """Log a faulty iteration; stop, with a checkpoint, after too many in a row."""
        if not row.get("fault"):
            self.consecutive_faults = 0
            return
        self.consecutive_faults += 1
        self.log.event(step, "fault", reason=row["fault_reason"], consecutive=self.consecutive_faults)
        if self.consecutive_faults >= self.config.max_consecutive_faults:
            saved = self.save(step + 1)
            if "reward" in row["fault_reason"]:
                advice = ("The reward gave no usable scores: fix it (see the reason), then resume with "
                          "resume=auto (add 'reward' to allow_config_change if you change its keys).")
            else:
                advice = ("Lower ppo.learning_rate or set ppo.max_grad_norm, then resume with resume=auto "
                          "(add 'ppo' to allow_config_change).")
            raise CoryError(
                f"{self.consecutive_faults} numeric faults in a row (last at step {step}: "
                f"{row['fault_reason']}); stopping. The updates of those iterations were skipped, so "
                f"{saved} holds the last good weights. {advice}")

    def _restore(self, checkpoint: Checkpoint) -> int:
        check_resumable(checkpoint, self.config)
        read_agent_states(self.agents, checkpoint.path, checkpoint.state["agents"])
        set_rng_state(checkpoint.state["rng"], checkpoint.tensors("rng"))
        restore_logs(self.run_dir, checkpoint)
        self.rows = read_jsonl_rows(self.run_dir / METRICS_FILE)
        self.consecutive_faults = int(checkpoint.state["consecutive_faults"])
        print(f"resuming from {checkpoint.path} (step {checkpoint.step})")
        return checkpoint.step

    def save(self, step: int) -> Path:
        """Checkpoint the whole run after ``step`` finished iterations."""
        def write(folder: Path) -> dict[str, Any]:
            agent_meta = on_every_agent(self.agents, Agent.write_state, folder)
            save_tensors(folder, "rng", torch_rng_tensors())
            return {"step": step, "config": redacted(to_dict(self.config)), "agents": agent_meta, "rng": rng_state(),
                    "consecutive_faults": self.consecutive_faults}

        if self.logger is not None:
            self.logger.event(step - 1, "checkpoint", checkpoint=step, path=str(step_dir(self.run_dir, step)))
        return save_checkpoint(self.run_dir, step, log_texts(self.run_dir, self.config), write,
                               self.config.keep_last)

    def close(self) -> None:
        self.agents.close()
