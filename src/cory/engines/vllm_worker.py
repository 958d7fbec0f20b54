"""The vLLM engine's process: ``python -m cory.engines.vllm_worker FD``.

It runs under the interpreter named by ``generation.vllm.python`` (often a virtual
environment of its own, since vLLM pins its own torch and transformers) and imports only
vLLM, torch, the standard library and ``cory.engines.weights``. It answers the trainer over
the connection on file descriptor FD, one message at a time:

- ``start``: build ``vllm.LLM`` on a model folder (with LoRA adapters on, if asked);
- ``sample``: generate for token-id prompts, each with its own sampling parameters and,
  with LoRA, its adapter (reloaded from its folder when the trainer says it changed);
- ``load``: reload every weight from the shared file into the running engine;
- ``close``: exit.

Every reply is ``{"ok": value}`` or ``{"error": text}``. The process exits when the
trainer's end of the connection closes, so it never outlives its run; it then removes the
files the trainer would have (``start``'s ``leftovers``: the weight file and the model
folder), as a trainer killed outright cannot.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any

from cory.engines.weights import Slot, read_shared


def reload_in_worker(worker: Any, path: str, slots: list[dict]) -> None:
    """Runs inside vLLM's model worker: load every tensor of the shared file in place.

    On CPU vLLM packs each linear layer's weight for oneDNN when it loads; a reload packs
    them again, except the LM head, which with tied embeddings keeps its old packed copy.
    It is packed again here from the reloaded weight.
    """
    worker.reload_weights(weights_iterator=read_shared(path, slots))
    model = worker.model_runner.get_model()
    head = getattr(model, "lm_head", None)
    if head is not None and next(model.parameters()).device.type == "cpu":
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm  # optional: runs in .venv-vllm only

        dispatch_cpu_unquantized_gemm(head, remove_weight=False)


class Engine:
    """The vLLM engine of one model and the shared file its weights come from."""

    def __init__(self, model: str, dtype: str, max_model_len: int, seed: int,
                 gpu_memory_utilization: float, enforce_eager: bool, weights: str | None,
                 slots: list[Slot], max_lora_rank: int = 0, max_loras: int = 1) -> None:
        from vllm import LLM  # optional: runs in .venv-vllm only

        lora = {"enable_lora": True, "max_lora_rank": max_lora_rank, "max_loras": max_loras} if max_lora_rank else {}
        self.llm = LLM(model=model, dtype=dtype, max_model_len=max_model_len, seed=seed,
                       gpu_memory_utilization=gpu_memory_utilization, enforce_eager=enforce_eager,
                       enable_prefix_caching=False, logprobs_mode="processed_logprobs", **lora)
        self.weights, self.slots = weights, slots
        import vllm  # optional: runs in .venv-vllm only

        self.version = vllm.__version__

    def sample(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from vllm import SamplingParams  # optional: runs in .venv-vllm only
        from vllm.inputs import TokensPrompt  # optional: runs in .venv-vllm only

        prompts = [TokensPrompt(prompt_token_ids=r["prompt"]) for r in requests]
        params = [SamplingParams(**r["params"]) for r in requests]
        adapters = [self._adapter(r.get("lora")) for r in requests]
        answers = []
        outputs = self.llm.generate(prompts, params, use_tqdm=False,
                                    lora_request=adapters if any(adapters) else None)
        for output in outputs:
            completion = output.outputs[0]
            tokens = list(completion.token_ids)
            logprobs = [step[token].logprob for step, token in zip(completion.logprobs or [], tokens)]
            answers.append({"tokens": tokens, "logprobs": logprobs, "finish": completion.finish_reason})
        return answers

    @staticmethod
    def _adapter(lora: dict[str, Any] | None) -> Any:
        """A LoRA request: the adapter's name, id and folder; ``reload`` when it changed."""
        if lora is None:
            return None
        from vllm.lora.request import LoRARequest  # optional: runs in .venv-vllm only

        return LoRARequest(lora["name"], lora["id"], lora["path"], load_inplace=lora["reload"])

    def load(self) -> None:
        slots = [dataclasses.asdict(slot) for slot in self.slots]
        self.llm.collective_rpc(reload_in_worker, args=(self.weights, slots))
        self.llm.reset_prefix_cache()


def serve(connection: Connection) -> None:
    """Answer messages until ``close`` or until the trainer goes away (it closed the pipe, or
    it was killed while the engine worked on its last message)."""
    engine: Engine | None = None
    leftovers: list[str] = []
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            _remove(leftovers)
            return
        op = message.get("op")
        try:
            if op == "close":
                connection.send({"ok": None})
                return
            if op == "start":
                leftovers = message.get("leftovers", [])
                engine = Engine(**message["args"])
                answer: dict[str, Any] = {"ok": engine.version}
            elif engine is None:
                raise RuntimeError(f"'{op}' before 'start'")
            elif op == "sample":
                answer = {"ok": engine.sample(message["requests"])}
            elif op == "load":
                engine.load()
                answer = {"ok": None}
            else:
                raise RuntimeError(f"unknown message {op!r}")
        except Exception:  # the trainer turns it into a CoryError naming the engine
            answer = {"error": traceback.format_exc(limit=6)}
        try:
            connection.send(answer)
        except OSError:  # the trainer is gone
            _remove(leftovers)
            return


def _remove(paths: list[str]) -> None:
    """Remove the files and folders a trainer that is gone would have removed."""
    for path in paths:
        shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else _unlink(path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def main() -> None:
    # collective_rpc sends reload_in_worker to vLLM's model worker by pickling it.
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    serve(Connection(int(sys.argv[1])))


if __name__ == "__main__":
    main()
