"""Sampling an agent's rollouts on vLLM (``generation.engine: vllm``).

The engine runs in a process of its own (``cory.engines.vllm_worker``), under the
interpreter ``generation.vllm.python`` names, because vLLM pins its own torch and
transformers. It starts on the agent's first rollout from a copy of the policy saved to a
temporary folder, and maps a shared-memory file (``cory.engines.weights``) into which the
agent writes its weights after every update; the engine then reloads them in place, so it
never restarts during a run. With LoRA the engine serves the frozen base and each agent's
adapter (``agents.lora.shared_base``: one engine for every agent of the base); an agent's
adapter is saved again after its update and reloaded in place by the next request that
uses it.

What vLLM returns is turned into the :class:`SampledBatch` our own sampler returns. Its
log-probs (after temperature: the engine runs with ``logprobs_mode: processed_logprobs``) are
kept beside the ones the agent recomputes with its policy (PPO needs them from the policy that
is trained): the agent reports the largest difference as ``sampler_logprob_gap``, the k3
estimate of KL(sampler || policy) as ``mismatch_kl``, and with ``generation.vllm.correction:
tis`` weights its policy loss by the truncated ratio of the two.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch

from cory.batches import SampledBatch
from cory.config.schema import VLLMConfig
from cory.engines.weights import SharedWeights, layout
from cory.errors import CoryError
from cory.models.generation import SamplingSettings

_SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the cory package
_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the ranks vLLM sizes its LoRA slots for
_INSTALL_HINT = ("install vLLM with `make vllm` (CPU: its own environment in .venv-vllm) or `pip install "
                 "vllm` beside cory (GPU), or point generation.vllm.python at an interpreter that has it")


def _say(text: str) -> None:
    """A line on the console (stderr, as the run's progress), at once."""
    print(text, file=sys.stderr, flush=True)


def vllm_environments() -> list[Path]:
    """Where ``generation.vllm.python: auto`` looks for a ``.venv-vllm``, in order: the working
    folder, beside the cory source (a checkout), beside this interpreter's environment (the
    checkout's ``.venv``, wherever cory is run from)."""
    roots = [Path.cwd(), _SOURCE_ROOT.parent, Path(sys.prefix).parent]
    return list(dict.fromkeys(root.resolve() / ".venv-vllm" for root in roots))


def engine_python(setting: str) -> str:
    """The interpreter that runs the engine. ``auto``: $CORY_VLLM_PYTHON, else the first
    ``.venv-vllm`` of ``vllm_environments``, else this one."""
    if setting != "auto":
        return setting
    if os.environ.get("CORY_VLLM_PYTHON"):
        return os.environ["CORY_VLLM_PYTHON"]
    for folder in vllm_environments():
        if (folder / "bin" / "python").exists():
            return str(folder / "bin" / "python")
    return sys.executable


def sampling_params(settings: SamplingSettings, budget: int, seed: int, stop_ids: list[int],
                    stop_strings: list[str]) -> dict[str, Any]:
    """vLLM's ``SamplingParams`` for one row, as keyword arguments: the same filters, one
    request seed, and our stop tokens as the only ones (EOS among them)."""
    if settings.penalise_padding:
        raise CoryError("generation.penalise_padding: vLLM sees no left padding; set it to false "
                        "or use generation.engine: hf")
    return {
        "n": 1,
        "max_tokens": budget,
        "min_tokens": min(settings.min_new_tokens, budget),
        "temperature": 0.0 if settings.greedy else settings.temperature,
        "top_k": settings.top_k,
        "top_p": settings.top_p,
        "repetition_penalty": settings.repetition_penalty,
        "seed": seed,
        "logprobs": 0,
        "stop_token_ids": stop_ids,
        "ignore_eos": True,
        "stop": stop_strings or None,
        "include_stop_str_in_output": True,
        "detokenize": bool(stop_strings),
        "skip_special_tokens": False,
    }


def to_sampled_batch(answers: list[dict[str, Any]], query_ids: torch.Tensor, query_mask: torch.Tensor,
                  pad_id: int) -> SampledBatch:
    """The engine's answers as a right-padded :class:`SampledBatch` (values zero: the policy
    computes them)."""
    width = max(max((len(a["tokens"]) for a in answers), default=1), 1)
    batch = len(answers)
    ids = torch.full((batch, width), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=query_mask.dtype)
    logprobs = torch.zeros((batch, width))
    for row, answer in enumerate(answers):
        n = len(answer["tokens"])
        ids[row, :n] = torch.tensor(answer["tokens"], dtype=torch.long)
        mask[row, :n] = 1
        logprobs[row, :n] = torch.tensor(answer["logprobs"], dtype=torch.float32)
    device = query_ids.device
    return SampledBatch(
        query_ids=query_ids, query_mask=query_mask, response_ids=ids.to(device),
        response_mask=mask.to(device), logprobs=logprobs.to(device),
        values=torch.zeros((batch, width), device=device),
        hit_length_limit=torch.tensor([a["finish"] == "length" for a in answers], device=device))


def _exception_line(text: str) -> str:
    """The exception a traceback ends with: the line naming it and the few lines of detail
    some libraries (pydantic) put after it."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    named = [i for i, line in enumerate(lines) if line.split(":")[0].endswith(("Error", "Exception"))]
    if not named:
        return lines[-1] if lines else "(no message)"
    return " ".join(line for line in lines[named[-1]:named[-1] + 3] if not line.startswith("For further"))


class VLLMEngine:
    """One agent's vLLM engine, or with ``lora_rank`` the engine of a peft base whose
    agents are its adapters (``lm``: a transformers model, or the peft model holding them).
    ``name`` labels its messages; ``device`` is the agents'."""

    def __init__(self, name: str, lm: Any, tokenizer: Any, config: VLLMConfig,
                 seed: int, max_model_len: int, device: torch.device, threads: int | None,
                 lora_rank: int = 0, max_loras: int = 1) -> None:
        self.name, self.lm, self.tokenizer, self.config = name, lm, tokenizer, config
        self.seed, self.max_model_len, self.device, self.threads = seed, max_model_len, device, threads
        self.python = engine_python(config.python)
        self.process: subprocess.Popen | None = None
        self.connection: Connection | None = None
        self.weights: SharedWeights | None = None
        self.folder: str | None = None
        self.version: str | None = None
        self.current = False  # whether the engine holds the policy's present weights
        self.lora_rank = min((r for r in _LORA_RANKS if r >= lora_rank), default=lora_rank) if lora_rank else 0
        self.max_loras = max_loras
        self.adapter_ids: dict[str, int] = {}  # LoRA: each adapter's id in the engine
        self.changed_adapters: set[str] = set()  # LoRA: to save and reload before their next rollout
        self.seconds_loading = 0.0
        self.seconds_starting = 0.0

    # ---------------------------------------------------------------- lifetime
    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_SOURCE_ROOT), env.get("PYTHONPATH")]))
        # vLLM's IPC sockets go into the engine's folder, removed with it (where the path stays
        # within a socket's 107 characters: the folder, '/', a UUID)
        if self.folder is not None and len(self.folder) + 37 <= 107:
            env["VLLM_RPC_BASE_PATH"] = self.folder
        if self.device.type == "cpu":
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.config.cpu_kv_cache_gib))
            cores = max(1, min(self.threads or os.cpu_count() or 1, os.cpu_count() or 1))
            env.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{cores - 1}")
            env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        elif self.device.index is not None:
            visible = env.get("CUDA_VISIBLE_DEVICES")
            env["CUDA_VISIBLE_DEVICES"] = (visible.split(",")[self.device.index] if visible
                                           else str(self.device.index))
        return env

    def start(self, weights: dict[str, torch.Tensor] | None = None) -> None:
        """Save the policy (``weights``, where given: a sharded policy's whole tensors), start
        the engine's process on it and map the weight file."""
        started = time.perf_counter()
        self.folder = tempfile.mkdtemp(prefix=f"cory-vllm-{self.name}-")
        if self.lora_rank:
            self._save_base()
        else:
            tensors = weights if weights is not None else self._tensors()
            self.lm.save_pretrained(self.folder, state_dict=dict(tensors))  # it empties the dict it gets
            self.weights = SharedWeights(layout(tensors), prefix=f"cory-vllm-{self.name}-")
            self.weights.write(tensors)
        self.tokenizer.save_pretrained(self.folder)
        ours, theirs = Pipe()
        self._log = open(Path(self.folder) / "engine.log", "wb")
        try:
            self.process = subprocess.Popen(
                [self.python, "-m", "cory.engines.vllm_worker", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], env=self._environment(), stdout=self._log,
                stderr=subprocess.STDOUT)
        except OSError as error:
            self.close()
            raise CoryError(f"generation.vllm.python: cannot run {self.python!r} ({error}); {_INSTALL_HINT}") from None
        theirs.close()
        self.connection = ours
        _say(f"{self.name}: starting its vLLM engine ({self.python}); this takes about a minute")
        dtype = str(next(self.lm.parameters()).dtype).removeprefix("torch.")
        self.version = self._call({"op": "start", "args": {
            "model": self.folder, "dtype": dtype, "max_model_len": self.max_model_len,
            "seed": self.seed, "gpu_memory_utilization": self.config.gpu_memory_utilization,
            "enforce_eager": self.config.enforce_eager,
            "weights": self.weights.path if self.weights else None,
            "slots": self.weights.slots if self.weights else [],
            "max_lora_rank": self.lora_rank, "max_loras": self.max_loras},
            "leftovers": [path for path in (self.weights.path if self.weights else None, self.folder) if path]},
            self.config.start_timeout, still="starting")
        self.current = True
        self.seconds_starting = time.perf_counter() - started
        _say(f"{self.name}: vLLM engine ready after {self.seconds_starting:.0f} s")

    def close(self) -> None:
        """Stop the engine's process and remove its folder and weight file."""
        if self.connection is not None and self.process is not None and self.process.poll() is None:
            try:
                self.connection.send({"op": "close"})
                self.process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
        if self.connection is not None:
            self.connection.close()
        if self.weights is not None:
            self.weights.close()
        if self.folder is not None:
            self._log.close()
            shutil.rmtree(self.folder, ignore_errors=True)
        self.process = self.connection = self.weights = self.folder = None
        self.current = False

    # -------------------------------------------------------------- messages
    def _call(self, message: dict[str, Any], timeout: float, still: str | None = None) -> Any:
        """Send ``message`` and wait for the answer; with ``still``, say every 20 s that the
        engine is still at it (``still`` names what it does)."""
        assert self.connection is not None and self.process is not None
        self.connection.send(message)
        sent = time.monotonic()
        deadline, next_word = sent + timeout, sent + 20.0
        while not self.connection.poll(1.0):
            if still is not None and time.monotonic() > next_word:
                _say(f"{self.name}: vLLM engine still {still} ({time.monotonic() - sent:.0f} s)")
                next_word += 20.0
            if self.process.poll() is not None:
                raise CoryError(self._failure(f"the engine's process exited with code {self.process.returncode}"))
            if time.monotonic() > deadline:
                raise CoryError(self._failure(f"no answer to '{message['op']}' within {timeout:.0f} s "
                                              "(generation.vllm.start_timeout)"))
        reply = self.connection.recv()
        if "error" in reply:
            raise CoryError(self._failure(_exception_line(reply["error"])))
        return reply["ok"]

    def _failure(self, what: str) -> str:
        log = Path(self.folder or "") / "engine.log"
        tail = log.read_text(errors="replace").strip().splitlines()[-12:] if log.is_file() else []
        missing = any("No module named 'vllm'" in line for line in tail) or "No module named 'vllm'" in what
        if any("CPU Generator does not use offset" in line for line in tail):
            return (f"{self.name}: vLLM engine: its KV cache filled up and it preempted a seeded request, which "
                    "vLLM's CPU sampler cannot resume; raise generation.vllm.cpu_kv_cache_gib (it must hold "
                    "ppo.batch_size x (prompt + generation.max_new_tokens) tokens)")
        looked = "; looked for .venv-vllm in " + ", ".join(str(f) for f in vllm_environments())
        hint = (_INSTALL_HINT + (looked if self.config.python == "auto" else "") if missing
                else "its log ends:\n  " + "\n  ".join(tail))
        return f"{self.name}: vLLM engine ({self.python}): {what}; {hint}"

    # -------------------------------------------------------------- the work
    def _save_base(self) -> None:
        """The peft model's frozen base, without adapters, as a Hugging Face folder."""
        base = self.lm.get_base_model()
        state = {name.replace(".base_layer", ""): tensor for name, tensor in base.state_dict().items()
                 if "lora_" not in name}
        base.save_pretrained(self.folder, state_dict=state)

    def _save_adapter(self, adapter: str) -> str:
        """Save ``adapter``'s present weights where the engine loads it from; its folder."""
        started = time.perf_counter()
        parent = Path(self.folder or "") / "adapters"
        self.lm.save_pretrained(str(parent), selected_adapters=[adapter])
        self.seconds_loading = time.perf_counter() - started
        return str(parent / adapter)

    def changed(self, adapter: str | None = None) -> None:
        """The policy (or, with LoRA, ``adapter``) was updated: push it before the next rollout."""
        if adapter is None:
            self.current = False
        else:
            self.changed_adapters.add(adapter)

    def _tensors(self) -> dict[str, torch.Tensor]:
        return {name: tensor.detach().to("cpu", copy=False) for name, tensor in self.lm.state_dict().items()}

    def push_weights(self, weights: dict[str, torch.Tensor] | None = None) -> None:
        """Write the policy's weights (or ``weights``) into the shared file and reload them
        in the engine."""
        started = time.perf_counter()
        assert self.weights is not None
        self.weights.write(weights if weights is not None else self._tensors())
        self._call({"op": "load"}, self.config.start_timeout)
        self.current = True
        self.seconds_loading = time.perf_counter() - started

    def sample(self, query_ids: torch.Tensor, query_mask: torch.Tensor, settings: SamplingSettings,
               stop_ids: list[int], pad_id: int, seeds: list[int], budgets: list[int],
               stop_strings: list[str], adapter: str | None = None) -> SampledBatch:
        """Sample one answer per left-padded prompt row, each with its seed and token budget
        (with LoRA: from ``adapter``)."""
        answers = self.answer(query_ids, query_mask, settings, stop_ids, seeds, budgets, stop_strings, adapter)
        return to_sampled_batch(answers, query_ids, query_mask, pad_id)

    def answer(self, query_ids: torch.Tensor, query_mask: torch.Tensor, settings: SamplingSettings,
               stop_ids: list[int], seeds: list[int], budgets: list[int], stop_strings: list[str],
               adapter: str | None = None, weights: dict[str, torch.Tensor] | None = None) -> list[dict[str, Any]]:
        """The engine's raw answers (tokens, log-probs, finish reason per row); ``sample``
        turns them into a :class:`SampledBatch`. ``weights``: the policy's whole tensors when
        the engine cannot read them from the model itself (a sharded agent)."""
        if self.process is None:
            self.start(weights)
        elif adapter is None and not self.current:
            self.push_weights(weights)
        lora = None
        if adapter is not None:
            reload = adapter in self.changed_adapters or adapter not in self.adapter_ids
            path = self._save_adapter(adapter) if reload else str(Path(self.folder or "") / "adapters" / adapter)
            self.adapter_ids.setdefault(adapter, len(self.adapter_ids) + 1)
            lora = {"name": adapter, "id": self.adapter_ids[adapter], "path": path, "reload": reload}
        requests = [{"prompt": ids[mask.bool()].tolist(), "lora": lora,
                     "params": sampling_params(settings, budget, seed, stop_ids, stop_strings)}
                    for ids, mask, seed, budget in zip(query_ids.cpu(), query_mask.cpu(), seeds, budgets)]
        answers = self._call({"op": "sample", "requests": requests}, self.config.sample_timeout)
        if adapter is not None:
            self.changed_adapters.discard(adapter)
        return answers
