"""A task over a caller's own prompts (the Python API's ``prompts=``), with generic observer
and revise templates."""

from __future__ import annotations

from cory.config.schema import RunConfig
from cory.tasks.base import GENERIC_REVISE_TEMPLATE, Task, split_train_test
from cory.tasks.shown import answer_join_for
from cory.types import Prompt

GENERIC_OBSERVER_TEMPLATE = "{query}\nAn earlier answer:\n{answers}\nYour answer:\n"


def custom_task(config: RunConfig, prompts: list[Prompt], eval_prompts: list[Prompt] | None) -> Task:
    """A task over the caller's prompts: ``eval_prompts``, or ``task.n_test`` of the prompts
    (at most a third, a fixed shuffle) held out for evaluation."""
    if eval_prompts is None:
        given = len(prompts)
        prompts, eval_prompts = split_train_test(prompts, config.task.n_test)
        print(f"prompts: {given} given and no eval_prompts: training on {len(prompts)}, evaluating on "
              f"{len(eval_prompts)} held out (task.n_test = {config.task.n_test}, at most a third of them); "
              "pass eval_prompts=[...] to choose the evaluation prompts yourself")
    if config.eval.n_prompts > len(eval_prompts):
        print(f"prompts: eval.n_prompts = {config.eval.n_prompts}, but only {len(eval_prompts)} evaluation "
              f"prompts exist; evaluation uses those {len(eval_prompts)}")
    return Task(name="custom", train=prompts, test=eval_prompts, default_reward="python",
                observer_template=config.task.observer_template or GENERIC_OBSERVER_TEMPLATE,
                revise_template=config.task.revise_template or GENERIC_REVISE_TEMPLATE,
                join=answer_join_for(config.task, "\n\n", verbatim=False,
                                     stop_strings=config.task.stop_strings or []),
                chat=bool(config.task.chat_template), stop_strings=list(config.task.stop_strings or []))
