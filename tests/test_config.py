"""Config loading, overrides, presets and validation errors that name the key."""

import pytest

from cory.config.schema import RunConfig, config_to_yaml

from cory.config.loading import load_config, resolve
from cory.config.tree import parse_override
from cory.errors import ConfigError


def write(tmp_path, text):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_defaults_and_presets():
    config = resolve({})
    assert isinstance(config, RunConfig)
    assert config.topology.name == "single" and config.n_agents == 1
    cory = resolve({"method": "cory"})
    assert cory.topology.name == "pioneer_observer" and cory.n_agents == 2
    assert cory.collective.lambda_ == 1.0 and cory.roles.swap_every == 5
    moe = resolve({"method": "moe"})
    assert moe.topology.answer == "value" and moe.collective.lambda_ == 0.0
    # TRL GRPOTrainer's defaults: dapo, no KL anywhere, group-scaled rewards, 8 samples, one pass
    trl = resolve({"method": "grpo_trl"})
    assert (trl.algorithm.loss_type, trl.algorithm.beta, trl.algorithm.scale_rewards, trl.algorithm.group_size) \
        == ("dapo", 0.0, "group", 8)
    assert (trl.ppo.init_kl_coef, trl.ppo.ppo_epochs, trl.ppo.cliprange, trl.ppo.learning_rate) == (0.0, 1, 0.2, 1e-6)
    assert trl.generation.temperature == 1.0 and resolve({"method": "grpo"}).algorithm.loss_type is None


def test_yaml_then_overrides_win(tmp_path):
    path = write(tmp_path, "method: cory\nppo:\n  learning_rate: 1e-4\n")
    config = load_config(path, ["ppo.learning_rate=2e-5", "collective.lambda=-1", "steps=7"])
    assert config.ppo.learning_rate == pytest.approx(2e-5)
    assert config.collective.lambda_ == -1.0
    assert config.steps == 7
    assert "lambda: -1.0" in config_to_yaml(config)


def test_string_numbers_from_yaml_are_coerced(tmp_path):
    config = load_config(write(tmp_path, "ppo:\n  learning_rate: 1e-5\n"))
    assert config.ppo.learning_rate == pytest.approx(1e-5)


@pytest.mark.parametrize("overrides, message", [
    (["ppo.lerning_rate=1e-5"], r"ppo.lerning_rate: unknown key. Did you mean 'learning_rate'"),
    (["stepz=3"], r"stepz: unknown key"),
    (["ppo.learning_rate=fast"], r"ppo.learning_rate: expected a number, got 'fast'"),
    (["ppo.learning_rate=0"], r"ppo.learning_rate: must be greater than 0"),
    (["ppo.learning_rate=-1e-5"], r"ppo.learning_rate: must be greater than 0"),
    (["steps=2.5"], r"steps: expected an integer"),
    (["ppo.adap_kl_ctrl=maybe"], r"ppo.adap_kl_ctrl: expected true or false"),
    (["topology.name=ring", "method=cory"], r"topology.name: expected one of"),
    (["method=dpo"], r"method: unknown method 'dpo'"),
    (["collective.lambda=abc", "method=cory"], r"collective.lambda: expected a number"),
    (["roles.swap_every=0", "method=cory"], r"roles.swap_every: must be at least 1"),
    (["ppo.batch_size=10", "ppo.mini_batch_size=4"], r"ppo.batch_size \(10\) must be divisible"),
    (["task.observer_template=Improve: {answers}", "method=cory"], r"task.observer_template: must contain \{query\}"),
    (["task.observer_template=Say {what}"], r"unknown placeholder"),
    (["topology.name=chain", "topology.n_agents=1"], r"topology.n_agents: 'chain' needs at least 2"),
    (["model=no-such-model"], r"model: unknown model spec 'no-such-model'"),
    (["generation.top_p=1.5"], r"generation.top_p: must be at most 1"),
    (["ppo=3"], r"ppo: expected a mapping"),
    (["ppo.cliprange=nan"], r"ppo.cliprange: expected a finite number"),
    (["algorithm.name=rloo", "ppo.batch_size=6", "ppo.mini_batch_size=6"], r"multiple of algorithm.group_size"),
])
def test_bad_values_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "ppo: [unclosed\n"))
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(write(tmp_path, "- a\n- b\n"))


def test_override_syntax():
    keys, value = parse_override("a.b=1")
    assert keys == ["a", "b"] and value.parsed == 1 and value.raw == "1"
    assert parse_override("a=x=y")[1].parsed == "x=y"
    assert parse_override("a=[1, 2]")[1].parsed == [1, 2]
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_override("novalue")
    with pytest.raises(ConfigError, match="empty part"):
        parse_override("a..b=1")


def test_cli_reports_config_errors_with_exit_code_2(capsys):
    from cory.cli import main

    assert main(["train", "/nonexistent.yaml"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_every_shipped_config_and_suite_resolves():
    from pathlib import Path

    from cory.experiments.suites import load_suite

    root = Path(__file__).resolve().parents[1] / "configs"
    configs = [p for p in root.rglob("*.yaml") if p.parent.name != "suites"]
    assert len(configs) > 20
    for path in configs:
        load_config(path)
    for path in (root / "suites").glob("*.yaml"):
        assert load_suite(path).runs


def test_cory_defaults_belong_to_the_cory_presets():
    plain = load_config(None, ["topology.name=chain", "topology.n_agents=3"])
    assert plain.collective.lambda_ == 0.0 and plain.roles.swap_every is None
    chain = load_config(None, ["method=cory_chain"])
    assert chain.collective.lambda_ == 1.0 and chain.roles.swap_every == 5


def test_ppo_keys_an_algorithm_ignores_are_named():
    from cory.config.validation import ignored_settings

    assert ignored_settings(load_config(None, ["ppo.vf_coef=0.5"])) == []
    grpo = ignored_settings(load_config(None, ["method=grpo", "ppo.vf_coef=0.5", "ppo.gamma=0.9",
                                               "ppo.learning_rate=3e-5"]))
    assert len(grpo) == 2 and grpo[0].startswith("ppo.gamma = 0.9 has no effect: algorithm 'grpo'")
    assert grpo[1].startswith("ppo.vf_coef = 0.5")
    # lam feeds the authors' REINFORCE (TRL's GAE returns) but not discounted returns
    assert ignored_settings(load_config(None, ["method=reinforce", "ppo.lam=0.9"])) == []
    assert len(ignored_settings(load_config(None, ["method=reinforce", "ppo.lam=0.9",
                                                   "algorithm.returns=discounted"]))) == 1


def test_a_bare_off_is_the_word_off_not_false(tmp_path):
    # YAML 1.1 reads `off` as false; a key whose choices include "off" takes it as the word.
    path = tmp_path / "run.yaml"
    path.write_text("agents: {dropout: off}\n")
    assert load_config(str(path), ["agents.dropout=trl"]).agents.dropout == "trl"
    assert load_config(str(path)).agents.dropout == "off"
    assert load_config(None, ["agents.dropout=off"]).agents.dropout == "off"
    with pytest.raises(ConfigError, match="generation.engine"):
        load_config(None, ["generation.engine=off"])


def test_the_registry_is_the_one_list_of_algorithms():
    from typing import get_args

    from cory.algorithms.registry import ALGORITHMS, AlgorithmName

    assert set(ALGORITHMS) == set(get_args(AlgorithmName))
    assert all(name == entry.name for name, entry in ALGORITHMS.items())
    with pytest.raises(ConfigError, match="algorithm.name: expected one of 'ppo', 'reinforce_clip'"):
        load_config(None, ["algorithm.name=ppo2"])
