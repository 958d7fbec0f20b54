"""bench/gpu_check.py stays runnable: its checks pass on the CPU with the tiny model."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch


def run_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "bench/gpu_check.py", *args], capture_output=True, text=True,
                          timeout=600)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the script would use it")
def test_without_cuda_it_says_so_and_exits_zero():
    result = run_check()
    assert result.returncode == 0
    assert "no CUDA device: nothing to check" in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the script would use it")
def test_its_checks_pass_on_the_cpu_with_the_tiny_model():
    # The vLLM check repeats tests/test_vllm_engine.py's training; skipped here for time.
    result = run_check("--allow-cpu", "--models", "tiny-random", "--iterations", "1", "--no-vllm",
                       "--shape", "tests/data/tiny_llama_shape.json", "--shape-batch", "4", "--shape-tokens", "8")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "decode tiny-random 16x16: eager" in result.stdout and "captured" in result.stdout
    assert "decode tiny_llama_shape 4x8: eager" in result.stdout
    assert "tiny_llama_shape ppo bf16 autocast" in result.stdout and "tiny_llama_shape cory bf16 autocast" in result.stdout
    assert "resume of tiny-random cory on cpu: exact over 4 iterations" in result.stdout
    assert "tiny-random ppo sharded over 2 ranks: iteration 0 within" in result.stdout
    assert "tiny-random cory fp32" in result.stdout and "MFU" in result.stdout
    assert "vllm: skipped (--no-vllm)" in result.stdout
    assert "all checks passed" in result.stdout
