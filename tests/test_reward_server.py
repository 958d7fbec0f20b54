"""Rewards over HTTP: a real `cory serve-reward` process on 127.0.0.1, the remote client,
OpenRLHF's request format, limits, errors, and a training run that outlives its server."""

from __future__ import annotations

import http.server
import json
import os
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
from cory.rewards.remote import BadRewardAnswer, RemoteReward, RewardRefused, RewardUnavailable
from cory.rewards.simple import VaderReward
from cory.types import Prompt
from helpers.training import run_trainer

PROMPTS = [Prompt("The film was"), Prompt("I hated"), Prompt("An actor"), Prompt("What a")]
RESPONSES = [" wonderful and moving.", " every minute of it.", " did fine.", " terrible mess!"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def reward_server(*args: str, port: int | None = None, cwd: Path | None = None, env: dict[str, str] | None = None):
    port = port or free_port()
    process = subprocess.Popen([sys.executable, "-m", "cory", "serve-reward", *args, "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd,
                               env={**os.environ, **(env or {})})
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
        remote = RemoteReward([url])
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
        with pytest.raises(BadRewardAnswer, match=message) as caught:
            RemoteReward([url], retry_window=0)(PROMPTS, RESPONSES)
    assert url in str(caught.value)


def test_an_unreachable_server_is_retried_for_the_window_then_named_without_its_password():
    url = f"http://alice:s3cret@127.0.0.1:{free_port()}/get_reward"
    started = time.perf_counter()
    with pytest.raises(RewardUnavailable, match=r"did not answer for \d+ s \(\d+ attempt\(s\)") as caught:
        RemoteReward([url], timeout=2, retry_window=0.5, backoff=0.05)(PROMPTS, RESPONSES)
    assert 0.3 <= time.perf_counter() - started < 5  # backoffs 0.05 + 0.1 + 0.2 fit the window; 0.4 more would not
    assert "s3cret" not in str(caught.value) and "alice:***@127.0.0.1" in str(caught.value)
    with pytest.raises(CoryError, match="nothing answers at http://alice:\\*\\*\\*@127") as caught:
        RemoteReward([url]).check_reachable()
    assert "s3cret" not in str(caught.value)


def _config(make_config, url, **extra):
    settings = {"steps": 4, "eval_every": 0, "save_every": 2, "keep_last": 2, "reward__name": "remote",
                "reward__url": url, "reward__retry_window": 1.5, "reward__timeout": 5,
                "allow_config_change": ["steps", "resume", "log", "output_dir", "reward"]}
    return make_config(**{**settings, **extra})


def test_a_dead_url_stops_the_run_before_training(make_config, tmp_path):
    config = _config(make_config, f"http://127.0.0.1:{free_port()}/get_reward")
    with pytest.raises(CoryError, match="reward.url: nothing answers at"):
        run_trainer(config)
    assert not (Path(config.output_dir) / "checkpoints").exists()


def _kill_after_first_iteration(server, metrics: Path):
    def kill():
        while not metrics.exists() or not metrics.read_text().strip():
            time.sleep(0.05)
        server.kill()
    thread = threading.Thread(target=kill)
    thread.start()
    return thread


def test_an_outage_stops_the_run_before_the_iteration_and_a_resume_trains_it(make_config, tmp_path):
    with reward_server(str(_toy_config(tmp_path))) as (server, url):
        metrics = Path(_config(make_config, url).output_dir) / "metrics.jsonl"
        killer = _kill_after_first_iteration(server, metrics)
        with pytest.raises(CoryError, match=r"no reward for iteration \d: reward server .* did not answer") as caught:
            run_trainer(_config(make_config, url))
        killer.join()
    assert "nothing was skipped" in str(caught.value) and "learning_rate" not in str(caught.value)
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert rows and not any(r.get("fault") for r in rows)  # nothing recorded as skipped
    stopped_at = len(rows)
    events = [json.loads(line) for line in (metrics.parent / "events.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e["event"] == "reward_unavailable"] == [stopped_at]
    waits = [e for e in events if e["event"] == "reward_wait"]  # the wait itself, as an event row
    assert [(e["step"], e["outcome"]) for e in waits] == [(stopped_at, "gave up")] and waits[0]["attempts"] >= 2
    with reward_server(str(_toy_config(tmp_path))) as (_, new_url):  # back, maybe on another port
        trainer = run_trainer(_config(make_config, new_url, resume="auto"))
    trained = [r["step"] for r in trainer.rows if "task_reward" in r]
    assert trained == [0, 1, 2, 3] and not any(r.get("fault") for r in trainer.rows)
    assert (Path(trainer.config.output_dir) / "final" / "summary.json").exists()


def test_a_server_restarted_within_the_retry_window_costs_no_iteration(make_config, tmp_path):
    port = free_port()
    with reward_server(str(_toy_config(tmp_path)), port=port) as (server, url):
        config = _config(make_config, url, reward__retry_window=60.0)
        metrics = Path(config.output_dir) / "metrics.jsonl"
        killer = _kill_after_first_iteration(server, metrics)
        restarted = {}

        def restart():
            killer.join()
            time.sleep(1.0)
            restarted["server"] = reward_server(str(_toy_config(tmp_path)), port=port)
            restarted["server"].__enter__()
        thread = threading.Thread(target=restart)
        thread.start()
        try:
            trainer = run_trainer(config)
        finally:
            thread.join()
            restarted["server"].__exit__(None, None, None)
    assert [r["step"] for r in trainer.rows if "task_reward" in r] == [0, 1, 2, 3]
    assert not any(r.get("fault") for r in trainer.rows)


def test_one_failing_request_fails_alone_and_shows_no_other_clients_text():
    helpers = Path(__file__).parent
    with reward_server("python", "reward.function=helpers.rewards:fails_on_x", "--max-wait-ms", "300",
                       cwd=helpers.parent / "tests") as (_, url):
        good = {"query": ["a private review"], "prompts": ["a "]}
        bad = {"query": ["an x here"], "prompts": ["an "]}
        answers = {}
        threads = [threading.Thread(target=lambda name=name, body=body: answers.__setitem__(
            name, post(url, json.dumps(body).encode()))) for name, body in (("good", good), ("bad", bad))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert answers["good"] == (200, {"rewards": [0.0], "scores": [0.0]})
    status, body = answers["bad"]
    assert status == 500 and "cannot score an x" in body["detail"] and "private" not in body["detail"]


def test_non_finite_scores_get_a_message_not_a_bare_500():
    with reward_server("python", "reward.function=helpers.rewards:nan_reward",
                       cwd=Path(__file__).parent) as (_, url):
        status, body = post(url, json.dumps({"query": ["a b", "c d"], "prompts": ["a", "c"]}).encode())
    assert status == 500 and "non-finite scores for item(s) [0, 1]" in body["detail"]


def test_a_token_guards_the_server_and_the_client_sends_it(monkeypatch):
    with reward_server("vader", env={"CORY_REWARD_TOKEN": "t0ken"}) as (_, url):
        status, body = post(url, json.dumps({"query": ["a"], "prompts": [""]}).encode())
        assert status == 401 and "bearer token" in body["detail"]
        with pytest.raises(RewardRefused, match=r"HTTP 401.*reward.token_env"):
            RemoteReward([url], token="wrong")(PROMPTS, RESPONSES)
        assert RemoteReward([url], token="t0ken")(PROMPTS, RESPONSES) == VaderReward()(PROMPTS, RESPONSES)
        monkeypatch.setenv("MY_TOKEN", "t0ken")
        from cory.config.loading import resolve
        from cory.rewards import build_reward

        reward = build_reward(resolve({"reward": {"name": "remote", "url": url, "token_env": "MY_TOKEN"}}).reward,
                              "vader")
        assert reward(PROMPTS, RESPONSES) == VaderReward()(PROMPTS, RESPONSES)


def test_several_servers_score_as_the_sum_of_their_rewards(tmp_path):
    toy = str(_toy_config(tmp_path))
    with reward_server("vader") as (_, first), reward_server(toy) as (_, second):
        got = RemoteReward([first, second])(PROMPTS, RESPONSES)
    from cory.rewards.simple import TargetFraction

    expected = [a + b for a, b in zip(VaderReward()(PROMPTS, RESPONSES), TargetFraction("a")(PROMPTS, RESPONSES))]
    assert got == pytest.approx(expected)


def _toy_config(tmp_path: Path) -> Path:
    """A config whose reward (the toy task's) the server serves."""
    path = tmp_path / "toy_reward.yaml"
    path.write_text("task: {name: toy, target: a}\n")
    return path


@contextmanager
def recording_server(delay_first: int = 0):
    """A real HTTP reward server on 127.0.0.1 that scores every response 0.5 and records the
    ``Authorization`` header of each request it gets. With ``delay_first`` it is not there for
    the first that many seconds (it starts listening late)."""
    headers: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (the stdlib's name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            headers.append(self.headers.get("Authorization"))
            payload = json.dumps({"rewards": [0.5] * len(body["query"])}).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self):  # noqa: N802 (the /health probe)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"status": "ok"}')

        def log_message(self, *_):
            pass

    port = free_port()
    servers = []

    def start():
        time.sleep(delay_first)
        servers.append(http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler))
        servers[0].serve_forever()

    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{port}/get_reward", headers
    finally:
        while delay_first and not servers:
            time.sleep(0.05)
        if servers:
            servers[0].shutdown()


def test_a_password_in_the_reward_url_reaches_no_file_of_the_run(make_config, tmp_path, monkeypatch):
    with recording_server() as (address, headers):
        url = f"http://alice:S3cretPW@{address}"
        config = _config(make_config, url, steps=2, save_every=1, keep_last=3, eval_every=1,
                         log__tensorboard=True)
        run_trainer(config)
        assert headers and all(h == "Basic YWxpY2U6UzNjcmV0UFc=" for h in headers)  # alice:S3cretPW
        run = Path(config.output_dir)
        files = [path for path in run.rglob("*") if path.is_file()]
        assert len(files) > 10 and any(p.name == "state.json" for p in files)
        leaks = [path for path in files if b"S3cretPW" in path.read_bytes()]
        assert not leaks, leaks
        assert "alice:***@" in (run / "config.yaml").read_text()
        # a resume takes the URL from its own config again: the same config resumes
        longer = run_trainer(_config(make_config, url, steps=3, save_every=1, keep_last=3, eval_every=1,
                                     log__tensorboard=True, resume="auto"))
        assert [r["step"] for r in longer.rows if "task_reward" in r] == [0, 1, 2]
        assert not [path for path in run.rglob("*") if path.is_file() and b"S3cretPW" in path.read_bytes()]
    # a run folder's own config has no password to offer: the error says how to give it
    from cory.saved_runs import evaluate_target

    with pytest.raises(CoryError, match=r"stored without its password .* reward.url=http://user:PASSWORD@"):
        evaluate_target(run)


def test_basic_auth_in_the_url_reaches_the_server_and_a_token_beside_it_is_refused():
    with recording_server() as (address, headers):
        RemoteReward([f"http://bob:pw@{address}"])(PROMPTS, RESPONSES)
        RemoteReward([f"http://{address}"], token="t0k")(PROMPTS, RESPONSES)
        assert headers == ["Basic Ym9iOnB3", "Bearer t0k"]  # bob:pw
        with pytest.raises(CoryError, match="reward.url carries a user:password and reward.token_env names a set "
                                            "token: both go in the one Authorization header"):
            RemoteReward([f"http://bob:pw@{address}"], token="t0k")


def test_waiting_on_a_down_reward_server_is_said_at_once_and_when_it_is_back():
    said: list[tuple[float, str]] = []
    started = time.monotonic()
    with recording_server(delay_first=2) as (address, _):
        reward = RemoteReward([f"http://carol:pw@{address}"], retry_window=30, backoff=0.2,
                              log=lambda text: said.append((time.monotonic() - started, text)))
        assert reward(PROMPTS, RESPONSES) == [0.5] * 4
    assert said[0][0] < 1.0  # the first line comes at once, not after the window
    assert "does not answer" in said[0][1] and "retrying for up to" in said[0][1]
    assert "carol:***@" in said[0][1] and all("pw@" not in text for _, text in said)
    assert said[-1][1].startswith(f"reward server http://carol:***@{address} answers again after")
    assert len(said) <= 3  # not a line per attempt
    assert reward.outages == [{"url": f"http://carol:***@{address}", "seconds": pytest.approx(2, abs=1.5),
                               "attempts": reward.outages[0]["attempts"], "outcome": "answered"}]
