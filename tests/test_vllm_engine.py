"""Rollouts on vLLM (``generation.engine: vllm``).

The first tests need no vLLM: the translation of our sampling settings, the shape of what
comes back, the shared weight file, the errors. The rest start real engines and run where
vLLM is installed (``make vllm`` makes .venv-vllm, which the engine finds by itself); they
skip elsewhere, saying so.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from cory.engines import weights
from cory.engines.vllm_engine import engine_python, sampling_params, to_sampled_batch
from cory.engines.weights import SharedWeights, layout, read_shared
from cory.errors import ConfigError, CoryError
from cory.models.generation import SamplingSettings
from cory.types import GenerateRequest
from helpers.training import run_trainer


def _has_vllm(python: str) -> bool:
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    try:
        return subprocess.run([python, "-c", probe], capture_output=True, timeout=60).returncode == 0
    except OSError:
        return False


ENGINE_PYTHON = engine_python("auto")
needs_vllm = pytest.mark.skipif(not _has_vllm(ENGINE_PYTHON),
                                reason=f"vLLM is not installed for {ENGINE_PYTHON} (make vllm)")


def vllm_config(make_config, **extra):
    settings = {"model": "tiny-random-h32", "threads": 1, "generation__engine": "vllm",
                "generation__max_new_tokens": 8}
    return make_config(**{**settings, **extra})


# ------------------------------------------------------------------ no engine needed
def test_the_vllm_environment_is_found_beside_an_installed_cory_from_any_folder(tmp_path, monkeypatch):
    """cory installed into app/.venv (not a checkout: its source sits in site-packages) and
    run from another folder still finds app/.venv-vllm."""
    import sys

    from cory.engines import vllm_engine

    engine = tmp_path / "app" / ".venv-vllm" / "bin" / "python"
    engine.parent.mkdir(parents=True)
    engine.write_text("")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    monkeypatch.delenv("CORY_VLLM_PYTHON", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "app" / ".venv"))
    monkeypatch.setattr(vllm_engine, "_SOURCE_ROOT", tmp_path / "app" / ".venv" / "lib" / "site-packages")
    assert engine_python("auto") == str(engine)
    assert vllm_engine.vllm_environments()[0] == tmp_path / "elsewhere" / ".venv-vllm"  # where it looked first


def test_sampling_settings_become_vllm_parameters():
    settings = SamplingSettings(max_new_tokens=16, min_new_tokens=3, temperature=0.7, top_k=5, top_p=0.9,
                                repetition_penalty=1.2)
    params = sampling_params(settings, budget=2, seed=7, stop_ids=[1, 9], stop_strings=["\n"])
    assert params["max_tokens"] == 2 and params["min_tokens"] == 2  # never above the row's budget
    assert (params["temperature"], params["top_k"], params["top_p"]) == (0.7, 5, 0.9)
    assert params["repetition_penalty"] == 1.2 and params["seed"] == 7
    # Our stop tokens are the only ones; the log-prob of each sampled token comes back.
    assert params["stop_token_ids"] == [1, 9] and params["ignore_eos"] and params["logprobs"] == 0
    assert params["stop"] == ["\n"] and params["detokenize"]
    greedy = sampling_params(SamplingSettings(greedy=True), budget=4, seed=0, stop_ids=[1], stop_strings=[])
    assert greedy["temperature"] == 0.0 and greedy["stop"] is None and not greedy["detokenize"]
    with pytest.raises(CoryError, match="generation.penalise_padding"):
        sampling_params(SamplingSettings(penalise_padding=True), 4, 0, [1], [])


def test_engine_answers_become_a_right_padded_generation():
    query = torch.tensor([[0, 5, 6], [7, 8, 9]])
    answers = [{"tokens": [3, 1], "logprobs": [-0.5, -1.0], "finish": "stop"},
               {"tokens": [4, 4, 4], "logprobs": [-0.1, -0.2, -0.3], "finish": "length"}]
    generated = to_sampled_batch(answers, query, (query > 0).long(), pad_id=0)
    assert generated.response_ids.tolist() == [[3, 1, 0], [4, 4, 4]]
    assert generated.response_mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    assert torch.allclose(generated.logprobs, torch.tensor([[-0.5, -1.0, 0.0], [-0.1, -0.2, -0.3]]))
    assert generated.hit_length_limit.tolist() == [False, True]


def test_shared_weights_are_seen_by_a_reader_after_each_write():
    tensors = {"a": torch.randn(3, 5), "b": torch.randn(7).bfloat16(), "c": torch.arange(4)}
    shared = SharedWeights(layout(tensors))
    try:
        shared.write(tensors)
        read = dict(read_shared(shared.path, shared.slots))
        assert all(torch.equal(read[name], tensors[name]) for name in tensors)
        assert all(slot.offset % 64 == 0 for slot in shared.slots)
        tensors["a"].add_(1.0)
        shared.write(tensors)
        assert torch.equal(read["a"], tensors["a"])  # the same mapping, no re-read
    finally:
        shared.close()
    assert not Path(shared.path).exists()


@pytest.mark.parametrize("key, value", [("generation__penalise_padding", True), ("agents__dropout", "trl"),
                                        ("generation__compile", True)])
def test_what_vllm_cannot_do_is_refused_at_load(make_config, key, value):
    with pytest.raises(ConfigError, match=key.replace("__", ".")):
        vllm_config(make_config, **{key: value})


def test_every_vllm_conflict_is_named_in_one_message(make_config):
    with pytest.raises(ConfigError, match=r"generation.penalise_padding: not available .*; agents.dropout: not available"):
        vllm_config(make_config, generation__penalise_padding=True, agents__dropout="trl")


@pytest.mark.parametrize("key, value", [("generation__top_p", 0.9), ("generation__top_k", 5),
                                        ("generation__repetition_penalty", 1.2), ("generation__min_new_tokens", 2)])
def test_truncated_importance_sampling_refuses_filters_that_reshape_the_sampler(make_config, key, value):
    with pytest.raises(ConfigError, match=f"{key.replace('__', '.')}: generation.vllm.correction: tis"):
        vllm_config(make_config, generation__vllm__correction="tis", **{key: value})


def test_a_rollout_correction_without_vllm_is_refused(make_config):
    with pytest.raises(ConfigError, match="generation.vllm.correction: corrects for vLLM's sampler"):
        make_config(generation__vllm__correction="tis")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="this interpreter has vLLM")
def test_an_interpreter_without_vllm_is_named_with_the_way_to_install_it(make_config, own_temp_root):
    config = vllm_config(make_config, generation__vllm__python=sys.executable, steps=1)
    with pytest.raises(CoryError, match="make vllm") as error:
        run_trainer(config)
    assert sys.executable in str(error.value)
    assert not engine_leftovers(own_temp_root)  # the failed start removed its folder and weights


# ------------------------------------------------------------------- real engines
@pytest.fixture(scope="module")
def engine_agent(tmp_path_factory):
    from conftest import tiny_config

    from cory.agents.factory import build_agents

    config = tiny_config(tmp_path_factory.mktemp("engine"), model="tiny-random-h32", threads=1,
                         generation__engine="vllm", generation__max_new_tokens=8)
    (agent,) = build_agents(config, indices=[0])
    yield agent
    agent.close()


PROMPTS = ["hello there", "a b c d e f", "xyz", "the movie was"]


def greedy_texts(agent, step: int) -> list[str]:
    return agent.generate(GenerateRequest(PROMPTS, step, phase="eval", greedy=True, keep=False)).texts


def our_greedy_texts(agent, step: int) -> list[str]:
    """Greedy answers from our own sampler: the agent's answerer without its engine."""
    engine, agent.answerer.engine = agent.answerer.engine, None
    try:
        return greedy_texts(agent, step)
    finally:
        agent.answerer.engine = engine


@needs_vllm
def test_seeded_rollouts_repeat_honour_budgets_and_match_the_policys_logprobs(engine_agent):
    first = engine_agent.generate(GenerateRequest(PROMPTS, step=3))
    assert engine_agent.held.sampler_logprob_gap is not None and engine_agent.held.sampler_logprob_gap < 1e-4
    again = engine_agent.generate(GenerateRequest(PROMPTS, step=3))
    other_step = engine_agent.generate(GenerateRequest(PROMPTS, step=4))
    assert first.texts == again.texts and first.texts != other_step.texts
    budgets = [1, 2, 5, 8]
    limited = engine_agent.generate(GenerateRequest(PROMPTS, step=3, budgets=budgets))
    assert all(n <= b for n, b in zip(limited.lengths, budgets))
    assert limited.hit_length_limit == [n == b for n, b in zip(limited.lengths, budgets)]


@needs_vllm
def test_updated_weights_reach_the_engine_without_a_restart(engine_agent):
    assert greedy_texts(engine_agent, 0) == our_greedy_texts(engine_agent, 0)
    process = engine_agent.engine.process
    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        for param in engine_agent.policy.lm.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.5)
    ours = our_greedy_texts(engine_agent, 0)
    engine_agent.engine.current = True  # pretend nothing changed: the engine answers as before
    stale = greedy_texts(engine_agent, 0)
    assert stale != ours
    engine_agent.engine.current = False  # what update() says
    assert greedy_texts(engine_agent, 0) == ours
    assert engine_agent.engine.process is process and engine_agent.engine.seconds_loading > 0


@pytest.fixture
def own_temp_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temporary folder of this test's own for everything an engine writes (its model
    folder, IPC sockets and, instead of /dev/shm, its weights file), so that a check for
    leftovers sees only this test's engine, whatever else runs on the machine. Its path is
    short: an IPC socket's path may not exceed 107 characters."""
    root = Path(tempfile.mkdtemp(prefix="cory-test-"))
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    monkeypatch.setattr(weights, "_shared_folder", lambda: str(root))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def engine_leftovers(root: Path) -> list[Path]:
    """Engine folders, weight files and socket files (vLLM's IPC sockets) under ``root``."""
    return [path for path in root.rglob("*") if path.name.startswith("cory-vllm-") or path.is_socket()]



KILLED_TRAINER = """
import sys, time
sys.path.insert(0, {tests!r})
from conftest import tiny_config
from cory.agents.factory import build_agents
from cory.types import GenerateRequest
config = tiny_config(__import__("pathlib").Path({folder!r}), model="tiny-random-h32", threads=1,
                     generation__engine="vllm", generation__max_new_tokens=4)
(agent,) = build_agents(config, indices=[0])
agent.generate(GenerateRequest(["hello"], step=0))
print(agent.engine.process.pid, agent.engine.weights.path, agent.engine.folder, flush=True)
time.sleep(600)
"""


@needs_vllm
def test_an_engine_outlives_no_trainer_killed_outright(tmp_path):
    script = KILLED_TRAINER.format(tests=str(Path(__file__).parent), folder=str(tmp_path))
    trainer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        pid, weights, folder = trainer.stdout.readline().split()
        assert Path(weights).exists() and Path(folder).is_dir()
    finally:
        trainer.kill()
        trainer.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (Path(weights).exists() or _alive(int(pid))):
        time.sleep(0.5)
    assert not _alive(int(pid)) and not Path(weights).exists() and not Path(folder).exists()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split()[2] == "Z")  # a zombie has exited


@needs_vllm
def test_cory_lora_agents_are_adapters_of_one_engine_reloaded_after_each_update(make_config, tmp_path, capfd,
                                                                                own_temp_root):
    # CORY's pair over two rounds with difference credit: every turn and counterfactual on the
    # engine; the policy loss corrected by truncated importance sampling against the engine
    config = vllm_config(make_config, method="refine", collective__credit="difference", steps=3, eval_every=3,
                         agents__lora__enabled=True, agents__lora__r=8, ppo__learning_rate=5e-2,
                         generation__vllm__correction="tis", output_dir=str(tmp_path / "run"))
    trainer = run_trainer(config)
    first, second = trainer.agents.agents
    assert first.engine is second.engine and first.engine.lora_rank == 8
    assert first.engine.process is None and not engine_leftovers(own_temp_root)  # stopped; files, sockets removed
    said = capfd.readouterr().err
    assert "starting its vLLM engine" in said and "vLLM engine ready after" in said  # the wait is said
    assert "eval/task_reward" in trainer.final
    rows = [row for row in trainer.rows if "agent0/kl_coef" in row]
    assert [row["step"] for row in rows] == [0, 1, 2]
    for row in rows:  # the engine samples from each adapter as the agent trained it
        assert row["agent0/sampler_logprob_gap"] < 1e-4 and row["agent1/sampler_logprob_gap"] < 1e-4
        assert row["sampler_logprob_gap"] == max(row["agent0/sampler_logprob_gap"], row["agent1/sampler_logprob_gap"])
        assert 0 <= row["mismatch_kl"] < 0.02  # CPU fp32: the engine's kernels and the policy's agree
        assert row["agent0/tis_weight"] == pytest.approx(1.0, abs=0.01)
    assert rows[-1]["kl"] > 0.01  # the adapters did move the policy (B starts at zero)


@needs_vllm
def test_a_sharded_agent_samples_on_its_first_ranks_engine_as_one_process_does(make_config, tmp_path, ray_cluster):
    settings = {"method": "ppo", "steps": 3, "eval_every": 3}
    one = run_trainer(vllm_config(make_config, output_dir=str(tmp_path / "one"), **settings))
    two = run_trainer(vllm_config(make_config, output_dir=str(tmp_path / "two"), backend="ray", agents__shards=2,
                                  ray__num_cpus_per_agent=0.5, **settings))
    rows = [[row for row in trainer.rows if "agent0/kl_coef" in row] for trainer in (one, two)]
    assert len(rows[1]) == 3
    for mine, theirs in zip(*rows, strict=True):  # the same rollouts, from weights pushed after each update
        assert theirs["agent0/sampler_logprob_gap"] < 1e-4, [r["agent0/sampler_logprob_gap"] for r in rows[1]]
        assert theirs["task_reward"] == pytest.approx(mine["task_reward"], rel=1e-4, abs=1e-6)
        assert theirs["kl"] == pytest.approx(mine["kl"], rel=1e-3, abs=1e-5)
