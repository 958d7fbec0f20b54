"""Reward over HTTP against the reward in-process.

    python bench/reward_server.py [--reward sentiment|vader] [--batch 16] [--requests 40] [--clients 8]

Starts `cory serve-reward` on 127.0.0.1, then measures (1) the added latency per training
iteration: one batch of ``--batch`` (prompt, response) pairs scored through the server vs
in this process (median of ``--requests``); (2) throughput: requests per second with
``--clients`` concurrent clients, each request a batch.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

from cory.config.loading import load_config
from cory.rewards import reward_of
from cory.rewards.remote import RemoteReward
from cory.tasks.base import Prompt


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_healthy(base: str, process: subprocess.Popen) -> None:
    for _ in range(1200):
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=1) as response:
                if json.loads(response.read())["status"] == "ok":
                    return
        except OSError:
            if process.poll() is not None:
                raise SystemExit(f"the server exited: {process.stdout.read()}")
            time.sleep(0.1)
    raise SystemExit("the server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reward", default="sentiment")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    prompts = [Prompt(f"This movie {i} was") for i in range(args.batch)]
    responses = [f" surprisingly good, with a plot twist number {i}." for i in range(args.batch)]
    local = reward_of(load_config(None, [f"reward.name={args.reward}"]), args.reward)
    local(prompts, responses)  # warm-up
    in_process = []
    for _ in range(args.requests):
        started = time.perf_counter()
        local(prompts, responses)
        in_process.append(time.perf_counter() - started)

    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "cory", "serve-reward", args.reward, "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", process)
        remote = RemoteReward([f"http://127.0.0.1:{port}/get_reward"])
        assert remote(prompts, responses) == local(prompts, responses), "served scores differ from in-process ones"
        served = []
        for _ in range(args.requests):
            started = time.perf_counter()
            remote(prompts, responses)
            served.append(time.perf_counter() - started)
        per_client = max(1, args.requests // args.clients)
        threads = [threading.Thread(target=lambda: [remote(prompts, responses) for _ in range(per_client)])
                   for _ in range(args.clients)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        throughput = per_client * args.clients / (time.perf_counter() - started)
    finally:
        process.kill()
    local_ms, served_ms = statistics.median(in_process) * 1e3, statistics.median(served) * 1e3
    print(f"reward '{args.reward}', batches of {args.batch} pairs, median of {args.requests}:")
    print(f"  in-process          {local_ms:8.1f} ms per batch")
    print(f"  over HTTP           {served_ms:8.1f} ms per batch  (+{served_ms - local_ms:.1f} ms per iteration)")
    print(f"  throughput          {throughput:8.1f} requests/s = {throughput * args.batch:.0f} pairs/s "
          f"with {args.clients} concurrent clients (batched on the server)")


if __name__ == "__main__":
    main()
