"""Bad input: every message names the field (or file) and says how to fix it."""

import gzip

import pytest

from cory.config.loading import load_config
from cory.errors import CoryError
from cory.sources import read_jsonl, read_texts

CONFIG_CASES = [
    # (overrides, field, fix)
    (["ppo.lerning_rate=1e-5"], "ppo.lerning_rate", "Did you mean 'learning_rate'"),
    (["steps=ten"], "steps", "expected an integer"),
    (["ppo.learning_rate=0"], "ppo.learning_rate", "must be greater than 0"),
    (["ppo.learning_rate=-3e-5"], "ppo.learning_rate", "must be greater than 0"),
    (["ppo.batch_size=10", "ppo.mini_batch_size=4"], "ppo.batch_size", "must be divisible by ppo.mini_batch_size"),
    (["method=cory", "task.observer_template=Improve {answers}"], "task.observer_template", "must contain {query}"),
    (["task.observer_template=Say {what} {query}"], "task.observer_template", "use {query} and {answers}"),
    (["method=cory", "collective.lambda=lots"], "collective.lambda", "expected a number"),
    (["method=cory", "topology.name=ring"], "topology.name", "expected one of 'single'"),
    (["method=dpo"], "method", "choose one of ppo, cory"),
    (["model=gpt-9"], "model", "Valid: smollm2-135m"),
    (["topology.name=chain", "topology.n_agents=1"], "topology.n_agents", "needs at least 2 agents"),
    (["topology.name=mesh", "topology.n_agents=40"], "topology.n_agents", "at most 16 agents"),
    (["method=cory", "agents.models=[tiny-random, tiny-random, tiny-random]"], "agents.models",
     "give one spec per agent"),
    (["device=gpu"], "device", "use auto, cpu, cuda or cuda:N"),
    (["agents.devices=[cpu]", "method=cory"], "agents.devices", "give one device per agent"),
    (["agents.devices=[cpu, tpu]", "method=cory"], "agents.devices[1]", "use cpu, cuda or cuda:N"),
    (["mixed_precision=bf16", "dtype=bfloat16"], "mixed_precision", "set dtype=float32"),
    (["method=cory", "roles.swap_every=0"], "roles.swap_every", "must be at least 1"),
    (["generation.length_sampler=[4, 20]"], "generation.length_sampler", "raise that too"),
    (["generation.min_new_tokens=30"], "generation.min_new_tokens", "exceeds generation.max_new_tokens"),
    (["reward.name=python"], "reward.function", "needs 'module:function'"),
    (["eval.pass_k=[4]"], "eval.pass_k", "raise n"),
    (["dtype=float16"], "dtype", "use float32 or bfloat16 on CPU"),
    (["ppo.use_score_norm=true"], "ppo.use_score_norm", "needs ppo.use_score_scaling: true"),
    (["algorithm.group_size=1", "method=rloo"], "algorithm.group_size", "must be at least 2"),
]


@pytest.mark.parametrize("overrides, field, fix", CONFIG_CASES, ids=[c[1] + ":" + c[2][:20] for c in CONFIG_CASES])
def test_bad_config_values(overrides, field, fix):
    with pytest.raises(CoryError) as caught:
        load_config(None, overrides)
    message = str(caught.value)
    assert field in message and fix in message, message


def test_missing_empty_and_malformed_data_files(tmp_path):
    with pytest.raises(CoryError, match=r"'.*missing.txt' does not exist; check the path \(task.source\)"):
        read_texts(tmp_path / "missing.txt")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(CoryError, match=r"is empty; it needs at least one record"):
        read_jsonl(tmp_path / "empty.jsonl")
    with gzip.open(tmp_path / "bad.jsonl.gz", "wt") as handle:
        handle.write('{"chosen": "a"}\n{oops\n')
    with pytest.raises(CoryError, match=r"bad.jsonl.gz, line 2: not valid JSON .* each line must hold one JSON object"):
        read_jsonl(tmp_path / "bad.jsonl.gz")
    (tmp_path / "fake.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(CoryError, match=r"cannot be read"):
        read_jsonl(tmp_path / "fake.jsonl.gz")


def test_output_dir_not_writable(tmp_path, make_config):
    from cory.trainer import Trainer

    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(CoryError, match=r"output_dir: cannot write to .*choose a writable folder"):
        Trainer(make_config(output_dir=str(blocker / "run"))).train()


def test_yaml_cannot_construct_python_objects(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("steps: !!python/object/apply:os.system ['echo hacked']\n")
    with pytest.raises(CoryError, match="not valid YAML"):
        load_config(path)


def test_reward_function_module_that_does_not_exist():
    from cory.rewards.simple import PythonReward

    with pytest.raises(CoryError, match=r"reward.function: cannot import module 'no_such_module'.*PYTHONPATH"):
        PythonReward("no_such_module:score")
    with pytest.raises(CoryError, match=r"reward.function: expected 'module:function'"):
        PythonReward("just_a_name")


def test_this_machine_is_checked_when_a_run_starts_not_when_its_config_is_read(tmp_path):
    from cory.config.preflight import check_environment

    (tmp_path / "weights").mkdir()
    cases = [([f"model={tmp_path / 'weights'}"], r"model: folder .* has no config.json; point it at a saved model"),
             ([f"model={tmp_path / 'gone'}"], r"model: folder .* does not exist"),
             (["method=cory", f"agents.models=[tiny-random, {tmp_path / 'gone'}]"], r"agents.models\[1\]: folder"),
             (["resume=/no/such/checkpoint"], r"resume: .* use 'auto' or a path")]
    for overrides, message in cases:
        config = load_config(None, overrides)  # a saved run's config reads anywhere
        with pytest.raises(CoryError, match=message):
            check_environment(config)


def test_reading_and_validating_a_config_imports_no_torch():
    import subprocess
    import sys

    code = ("import sys; from cory.config.loading import load_config; "
            "load_config(None, ['method=cory', 'device=cuda:3', 'model=/somewhere/else']); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_packaged_model_names_are_known_without_torch():
    from cory.models.packaged import PACKAGED_MODELS
    from cory.models.specs import PACKAGED_NAMES

    assert tuple(PACKAGED_MODELS) == PACKAGED_NAMES


def test_unknown_cli_subcommand_is_usage_error(capsys):
    from cory.cli import main

    with pytest.raises(SystemExit) as caught:
        main(["trian"])
    assert caught.value.code == 2
    assert "invalid choice: 'trian'" in capsys.readouterr().err
