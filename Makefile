# tagjit: `make demo` runs vLLM on CPU with tagjit against a tiny model; `make test` runs the tests.
# Both set up everything they need on a fresh machine (a .venv with vLLM for CPU, a .venv-sglang
# with SGLang's grammar modules for the SGLang tests, and a .venv-vllm033 with vLLM 0.33's Python
# modules beside CPU torch for tests/vllm_classes).

PYTHON ?= python3
VENV ?= .venv
SGLANG_VENV ?= .venv-sglang
VLLM033_VENV ?= .venv-vllm033
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# The main suite runs in this many pytest-xdist workers, a test file per worker at a time (its module and session
# fixtures, a started vllm serve among them, stay in one process); 1 runs it in this process.
PYTEST_WORKERS ?= 2
XDIST := $(if $(filter-out 1,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile)

.PHONY: setup setup-sglang setup-vllm033 demo test test-unit test-integration test-sglang bench clean

setup: $(VENV)/.tagjit-installed

$(VENV)/.tagjit-installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[vllm,test]'
	@# PyPI's torchvision/torchaudio/torchcodec are CUDA builds that break beside CPU torch.
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec || true
	$(PY) scripts/vllm_cpu_shim.py
	touch $@

setup-sglang: $(SGLANG_VENV)/.tagjit-installed

$(SGLANG_VENV)/.tagjit-installed: pyproject.toml scripts/setup_sglang.sh scripts/cpu_venv.sh
	bash scripts/setup_sglang.sh $(SGLANG_VENV)
	touch $@

setup-vllm033: $(VLLM033_VENV)/.tagjit-installed

$(VLLM033_VENV)/.tagjit-installed: pyproject.toml scripts/setup_vllm033.sh scripts/cpu_venv.sh
	bash scripts/setup_vllm033.sh $(VLLM033_VENV)
	touch $@

demo: setup
	$(PY) integration/demo.py

test: setup setup-sglang setup-vllm033
	$(PY) -m pytest -q -p no:cacheprovider $(XDIST) --ignore=tests/sglang tests integration $(PYTEST_ARGS)
	$(SGLANG_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/sglang $(PYTEST_ARGS)
	$(VLLM033_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/vllm_classes tests/test_tools_vllm.py \
		tests/test_vllm_grammar_futures.py tests/test_vllm_plugin.py $(PYTEST_ARGS)

test-unit: setup
	$(PY) -m pytest -q $(XDIST) --ignore=tests/sglang tests $(PYTEST_ARGS)

test-integration: setup
	$(PY) -m pytest -q $(XDIST) integration $(PYTEST_ARGS)

test-sglang: setup-sglang
	$(SGLANG_VENV)/bin/python -m pytest -q tests/sglang $(PYTEST_ARGS)

bench: setup
	$(PY) benchmarks/bitmask.py --quick
	$(PY) benchmarks/tools.py
	$(PY) benchmarks/any_order.py

clean:
	rm -rf $(VENV) $(SGLANG_VENV) $(VLLM033_VENV) build *.egg-info
