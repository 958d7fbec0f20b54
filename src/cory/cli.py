"""``cory train | eval | prepare | experiment | plot | screen | probe | train-rm | serve-reward``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cory.config.loading import load_config
from cory.errors import ConfigError, CoryError
from cory.experiments.confirmation import confirmation_report
from cory.experiments.report import export_suite, write_results
from cory.experiments.screen import screen_report
from cory.experiments.suites import load_suite
from cory.logging import quiet_library_bars
from cory.models.packaged import converted_folder
from cory.sources import vader_snippets_file

# The imports inside the commands below load torch (seconds): each command pays only for what
# it runs, and ``cory --help`` or a config error answers at once.


def _train(args: argparse.Namespace) -> None:
    from cory.trainer import Trainer  # torch

    config = load_config(args.config, args.overrides)
    trainer = Trainer(config)
    try:
        final = trainer.train()
    finally:
        trainer.close()
    keys = [k for k in ("eval/task_reward", "eval/kl", "eval/system/task_reward") if k in final]
    print("final evaluation: " + ", ".join(f"{k} = {final[k]:.4f}" for k in keys))
    print(f"results: {Path(config.output_dir).resolve()}")


def _prepare(args: argparse.Namespace) -> None:
    from cory.rewards.sentiment import REPORT_FILE, ensure_sentiment_classifier  # torch

    for name in args.models:
        print(f"model {name}: {converted_folder(name)}")
    print(f"IMDB snippets: {vader_snippets_file()}")
    if not args.skip_classifier:
        folder = ensure_sentiment_classifier()
        print(f"sentiment classifier: {folder} ({(folder / REPORT_FILE).read_text().strip()})")


def _eval(args: argparse.Namespace) -> None:
    from cory.saved_runs import evaluate_target, write_eval  # torch

    result, config, run_dir = evaluate_target(args.target, args.overrides)
    console = Console()
    table = Table(title=f"evaluation on {config.eval.n_prompts} held-out prompts "
                        f"x {config.eval.samples_per_prompt} sample(s)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in sorted(result.metrics):
        if not key.startswith("time/"):
            table.add_row(key, f"{result.metrics[key]:.4f}")
    console.print(table)
    samples = Table(title="samples", show_lines=True)
    for column in ("role", "query", "response", "task_reward"):
        samples.add_column(column)
    for row in result.samples[: args.samples]:
        samples.add_row(str(row["role"]), row["query"][-200:], row["response"], f"{row['task_reward']:.3f}")
    console.print(samples)
    if run_dir is not None:
        print(f"written: {write_eval(run_dir, result)}")


def _experiment(args: argparse.Namespace) -> None:
    from cory.experiments.running import run_suite  # torch

    suite = load_suite(args.suite, args.overrides)
    print(f"suite '{suite.config.name}': {len(suite.runs)} runs -> {suite.output_dir}")
    print(f"results: {run_suite(suite, seeds=args.seeds, names=args.runs)}")


def _plot(args: argparse.Namespace) -> None:
    if args.export:
        print(f"results: {export_suite(Path(args.folder), Path(args.export))}")
    else:
        print(f"results: {write_results(Path(args.folder))}")


def _screen(args: argparse.Namespace) -> None:
    missing = [folder for folder in [*args.folders, *args.confirm] if not (Path(folder) / "suite.json").exists()]
    if missing:
        raise ConfigError(f"cory screen: {', '.join(missing)} holds no suite.json; pass suite output folders "
                          "(runs/suites/NAME) or their exported copies (docs/results/NAME)")
    screened = [Path(folder) for folder in args.folders]
    report = screen_report(screened) + "\n" + confirmation_report(screened, [Path(f) for f in args.confirm])
    print(report, end="")
    if args.out:
        Path(args.out).write_text(report)


def _probe(args: argparse.Namespace) -> None:
    from cory.experiments.probe import probe, probe_table, write_probe  # torch

    config = load_config(args.config, args.overrides)
    rows = probe(config, args.joins)
    title = f"{config.agent_models()[0]} on {config.task.name}"
    print(probe_table(rows, title))
    if args.out:
        write_probe(rows, title, Path(args.out))
        print(f"written: {Path(args.out).with_suffix('.md')} and .json")


def _train_rm(args: argparse.Namespace) -> None:
    from cory.rewards.reward_model import reward_model_folder, train_reward_model  # torch
    from cory.tasks.hh import load_pairs  # transformers

    pairs = load_pairs(args.data)
    if args.max_pairs:
        pairs = pairs[: args.max_pairs]
    out = Path(args.out) if args.out else reward_model_folder(args.task)
    report = train_reward_model(pairs, out, backbone=args.backbone, epochs=args.epochs,
                                learning_rate=args.learning_rate, batch_size=args.batch_size,
                                max_length=args.max_length)
    print(f"reward model: {out} (held-out pairwise accuracy {report['held_out_pairwise_accuracy']:.3f})")


def _serve_reward(args: argparse.Namespace) -> None:
    from cory.rewards import reward_of  # torch
    from cory.serving.reward_server import Limits, serve  # the optional fastapi
    from cory.tasks.base import DEFAULT_REWARDS  # transformers

    if Path(args.spec).is_file():
        config = load_config(args.spec, args.overrides)
    else:
        config = load_config(None, [f"reward.name={args.spec}", *args.overrides])
    name = config.reward.name or DEFAULT_REWARDS[config.task.name]
    if name == "remote":
        raise ConfigError("serve-reward: a remote reward cannot be served again; name the reward itself")
    reward = reward_of(config, name)
    limits = Limits(args.max_batch, args.max_wait_ms, args.max_items)
    token = os.environ.get(args.token_env) or None
    guard = f"bearer token from ${args.token_env}" if token else f"no token (${args.token_env} is unset)"
    print(f"serving reward '{name}' on http://{args.host}:{args.port}/get_reward (health: /health; {guard})",
          flush=True)
    serve(reward, args.host, args.port, limits, description=name, token=token)


def _int_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 0,1, got '{text}'") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cory", description="Multi-agent RL fine-tuning of LLMs (CORY).")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train with a YAML config")
    train.add_argument("config", help="YAML config file")
    train.add_argument("overrides", nargs="*", help="dotted overrides, e.g. ppo.learning_rate=1e-5")
    train.set_defaults(run=_train)
    evaluate = commands.add_parser("eval", help="evaluate a run folder, a checkpoint, or a config's base models")
    evaluate.add_argument("target", help="run folder, checkpoint folder, or YAML config")
    evaluate.add_argument("overrides", nargs="*", help="dotted overrides, e.g. eval.n_prompts=256")
    evaluate.add_argument("--samples", type=int, default=6, help="sample rows to print")
    evaluate.set_defaults(run=_eval)
    experiment = commands.add_parser("experiment", help="run a suite: methods x seeds -> table and plots")
    experiment.add_argument("suite", help="suite YAML file")
    experiment.add_argument("overrides", nargs="*", help="dotted overrides for every run")
    experiment.add_argument("--seeds", type=_int_list, default=None, metavar="0,1,...",
                            help="train only these seeds (split a suite across processes or machines)")
    experiment.add_argument("--runs", type=lambda text: [n for n in text.split(",") if n], default=None,
                            metavar="NAME,...", help="train only these runs of the suite")
    experiment.set_defaults(run=_experiment)
    plot = commands.add_parser("plot", help="rewrite a suite's table and plots from its runs")
    plot.add_argument("folder", help="the suite's output folder")
    plot.add_argument("--export", metavar="FOLDER", default=None,
                      help="also copy the tables, plots and each run's metrics, config and summary there "
                           "(small enough to commit; no weights)")
    plot.set_defaults(run=_plot)
    screen = commands.add_parser(
        "screen", help="rank every arm of several suites against their PPO arm; the confirmation rule per model")
    screen.add_argument("folders", nargs="+", help="suite output folders (or exported copies), one per cell")
    screen.add_argument("--confirm", nargs="+", default=[], metavar="FOLDER",
                        help="confirmation suite folders (the selected cells on fresh seeds): tested, Holm over them")
    screen.add_argument("--out", default=None, metavar="FILE", help="also write the markdown there")
    screen.set_defaults(run=_screen)
    probe_command = commands.add_parser(
        "probe", help="does the model use an answer it is shown? (no training; CORY's precondition)")
    probe_command.add_argument("config", help="YAML config file (its model, task, reward and eval settings)")
    probe_command.add_argument("overrides", nargs="*", help="dotted overrides, e.g. model=gemma3-270m")
    probe_command.add_argument("--join", dest="joins", action="append", default=[], choices=["clean", "verbatim"],
                               help="also show every answer under this join (repeatable), on the same draws: "
                                    "e.g. --join verbatim compares the join before 2026-12-07")
    probe_command.add_argument("--out", default=None, metavar="PATH",
                               help="also write PATH.md (the table) and PATH.json (the numbers)")
    probe_command.set_defaults(run=_probe)
    train_rm = commands.add_parser("train-rm", help="train a Bradley-Terry reward model on preference pairs")
    train_rm.add_argument("--data", default=None, help="JSONL(.gz) of {chosen, rejected} or a datasets id "
                                                      "(default Anthropic/hh-rlhf)")
    train_rm.add_argument("--task", default="hh", help="the task whose default reward model this becomes")
    train_rm.add_argument("--out", default=None, help="output folder (default: the task's cached reward model)")
    train_rm.add_argument("--backbone", default=None, help="HF model id / folder (default all-MiniLM-L6-v2)")
    train_rm.add_argument("--epochs", type=int, default=1)
    train_rm.add_argument("--learning-rate", type=float, default=3e-5)
    train_rm.add_argument("--batch-size", type=int, default=16)
    train_rm.add_argument("--max-length", type=int, default=256)
    train_rm.add_argument("--max-pairs", type=int, default=None)
    train_rm.set_defaults(run=_train_rm)
    serve_reward = commands.add_parser("serve-reward", help="serve a reward over HTTP (OpenRLHF's remote format)")
    serve_reward.add_argument("spec", help="a reward name (sentiment, vader, exact_match, reward_model, "
                                           "hf_classifier, python, ...) or a config file whose reward to serve")
    serve_reward.add_argument("overrides", nargs="*", help="dotted overrides, e.g. reward.model=FOLDER")
    serve_reward.add_argument("--host", default="127.0.0.1", help="interface (default: this machine only)")
    serve_reward.add_argument("--port", type=int, default=8000)
    serve_reward.add_argument("--max-batch", type=int, default=64, help="items scored together")
    serve_reward.add_argument("--max-wait-ms", type=float, default=10.0, help="longest wait to fill a batch")
    serve_reward.add_argument("--max-items", type=int, default=4096, help="largest request accepted")
    serve_reward.add_argument("--token-env", default="CORY_REWARD_TOKEN",
                              help="environment variable holding the bearer token clients must send "
                                   "(default CORY_REWARD_TOKEN; unset: no token asked)")
    serve_reward.set_defaults(run=_serve_reward)
    prepare = commands.add_parser("prepare", help="convert packaged models, fetch data, train the "
                                                   "sentiment classifier (all cached)")
    prepare.add_argument("--models", nargs="*", default=["smollm2-135m"])
    prepare.add_argument("--skip-classifier", action="store_true")
    prepare.set_defaults(run=_prepare)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with quiet_library_bars():
            args.run(args)
    except CoryError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
