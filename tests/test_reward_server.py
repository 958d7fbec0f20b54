"""Rewards over HTTP: a real `cory serve-reward` process on 127.0.0.1, the remote client,
OpenRLHF's request format, limits, errors, and a training run that outlives its server."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from cory.errors import CoryError
from cory.rewards.exact_match import ExactMatchReward
from cory.rewards.remote import RemoteReward, RewardUnavailable
from cory.rewards.simple import VaderReward
from cory.tasks.base import Prompt
from helpers.training import run_trainer

PROMPTS = [Prompt("The film was"), Prompt("I hated"), Prompt("An actor"), Prompt("What a")]
RESPONSES = [" wonderful and moving.", " every minute of it.", " did fine.", " terrible mess!"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def reward_server(*args: str):
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "cory", "serve-reward", *args, "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1) as response:
                    if json.loads(response.read())["status"] == "ok":
                        break
            except (urllib.error.URLError, OSError):
                if process.poll() is not None:
                    raise AssertionError(process.stdout.read())
                time.sleep(0.1)
        yield process, f"{url}/get_reward"
    finally:
        process.kill()
        process.wait()


def post(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_served_scores_equal_in_process_scores_exactly_and_concurrent_requests_batch():
    with reward_server("vader", "--max-items", "8") as (_, url):
        remote = RemoteReward(url)
        assert remote(PROMPTS, RESPONSES) == VaderReward()(PROMPTS, RESPONSES)
        results = [None] * 8
        threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, remote(PROMPTS, RESPONSES)))
                   for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(r == results[0] for r in results)
        status, body = post(url, json.dumps({"query": ["x"] * 9, "prompts": [""] * 9}).encode())
        assert status == 413 and "limit of 8 per request" in body["detail"]
        status, body = post(url, b"{not json")
        assert status == 400 and "not JSON" in body["detail"]
        status, body = post(url, json.dumps({"query": ["a", "b"], "prompts": ["a"]}).encode())
        assert status == 422 and "must be as long" in body["detail"]


def test_openrlhf_requests_with_labels_reach_an_exact_match_reward():
    prompts = [Prompt("Q: 2+2?\nA:", "4"), Prompt("Q: 3+4?\nA:", "7")]
    responses = [" The answer is 4.", " The answer is 8."]
    with reward_server("exact_match") as (_, url):
        body = {"query": [p.query + r for p, r in zip(prompts, responses)], "prompts": [p.query for p in prompts],
                "labels": ["4", "7"]}
        status, answer = post(url, json.dumps(body).encode())
    assert status == 200 and answer["rewards"] == ExactMatchReward()(prompts, responses) == [1.0, 0.0]


@contextmanager
def misbehaving_server(payload: bytes):
    """A real HTTP server on 127.0.0.1 that answers every POST with ``payload``."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (the stdlib's name)
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *_):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/get_reward"
    finally:
        server.shutdown()


@pytest.mark.parametrize("payload, message", [
    (b'{"rewards": [1.0]}', "returned 1 scores for 4 responses"),
    (b'{"rewards": [1.0, NaN, 0.0, 0.0]}', "non-finite scores"),
    (b"<html>oops</html>", "malformed JSON"),
])
def test_bad_answers_name_the_url_and_the_problem(payload, message):
    with misbehaving_server(payload) as url:
        with pytest.raises(RewardUnavailable, match=message) as caught:
            RemoteReward(url, retries=0)(PROMPTS, RESPONSES)
    assert url in str(caught.value)


def test_a_refused_connection_is_retried_then_names_the_url():
    url = f"http://127.0.0.1:{free_port()}/get_reward"
    started = time.perf_counter()
    with pytest.raises(RewardUnavailable, match=rf"{url} did not answer after 3 attempt\(s\)"):
        RemoteReward(url, timeout=2, retries=2, backoff=0.05)(PROMPTS, RESPONSES)
    assert time.perf_counter() - started >= 0.05 + 0.1  # the backoff waited


def test_a_run_survives_its_reward_server_dying_and_resumes_when_it_is_back(make_config, tmp_path):
    def config(url, **extra):
        return make_config(steps=4, eval_every=0, save_every=1, keep_last=2, max_consecutive_faults=2,
                           reward__name="remote", reward__url=url, reward__retries=1, reward__timeout=5,
                           allow_config_change=["steps", "resume", "log", "output_dir", "reward"], **extra)

    with reward_server(str(_toy_config(tmp_path))) as (server, url):
        metrics = Path(config(url).output_dir) / "metrics.jsonl"

        def kill_after_first_iteration():
            while not metrics.exists() or not metrics.read_text().strip():
                time.sleep(0.05)
            server.kill()
        killer = threading.Thread(target=kill_after_first_iteration)
        killer.start()
        with pytest.raises(CoryError, match="2 numeric faults in a row"):
            run_trainer(config(url))
        killer.join()
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    faults = [r for r in rows if r.get("fault")]
    assert len(faults) == 2 and all("did not answer" in r["fault_reason"] for r in faults)
    assert "task_reward" in rows[0] and not rows[0].get("fault")
    with reward_server(str(_toy_config(tmp_path))) as (_, new_url):  # back, maybe on another port
        trainer = run_trainer(config(new_url, resume="auto"))
    # Steps 1 and 2 stay recorded as skipped faults; the run continued after its checkpoint.
    assert [r["step"] for r in trainer.rows if "task_reward" in r and not r.get("fault")] == [0, 3]
    assert [r["step"] for r in trainer.rows if r.get("fault")] == [1, 2]
    assert (Path(trainer.config.output_dir) / "final" / "summary.json").exists()


def _toy_config(tmp_path: Path) -> Path:
    """A config whose reward (the toy task's) the server serves."""
    path = tmp_path / "toy_reward.yaml"
    path.write_text("task: {name: toy, target: a}\n")
    return path
