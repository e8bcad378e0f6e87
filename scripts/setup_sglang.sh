#!/usr/bin/env bash
# A CPU-only SGLang 0.5.23 test environment with tagjit, separate from the vLLM venv (SGLang pins
# xgrammar 0.2.7, vLLM 0.2.8). Idempotent. Usage: scripts/setup_sglang.sh [VENV] (default .venv-sglang)
#
# SGLang is installed with --no-deps (its dependency list pulls CUDA wheels), plus exactly what its
# grammar, scheduler-request and plugin modules import on CPU. torch stays the CPU build: every pip
# call is constrained to torch==2.13.0, and the CPU wheel is taken from pip's find-links (this
# workplace's /opt/wheels) or, failing that, from TORCH_INDEX (default: PyTorch's CPU index).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-sglang}"
# shellcheck source=cpu_venv.sh
source "$ROOT/scripts/cpu_venv.sh"  # the venv with CPU torch, `pip`, "$constraints"

# The engine's grammar stack and what its scheduler-side modules import on CPU; fastapi, uvicorn,
# uvloop and einops for its OpenAI serving layer (tagjit's tool-call hooks resolve it there, and
# tests/sglang/test_sglang_tools.py drives it).
pip install -c "$constraints" \
    "xgrammar==0.2.7" "transformers==5.19.0" \
    orjson psutil pybase64 requests pillow starlette msgspec pyzmq ipython aiohttp openai \
    partial_json_parser dill sentencepiece gguf compressed-tensors \
    fastapi uvicorn uvloop einops
pip install --no-deps "sglang==0.5.23"

# tagjit (editable, registers the sglang.srt.plugins entry point) and the test tools.
pip install --no-deps -e "$ROOT"
pip install -c "$constraints" jsonschema prometheus_client numpy "interegular>=0.3.3" pytest hypothesis

"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import torch, sglang.srt.constrained.grammar_manager  # noqa: F401
import fastapi, uvicorn, uvloop, einops  # noqa: F401  (SGLang's OpenAI serving layer)
assert torch.version.cuda is None, f"CUDA torch {torch.__version__} in the SGLang test venv"
print(f"SGLang test venv ready: torch {torch.__version__}, xgrammar {md.version('xgrammar')}, "
      f"sglang {md.version('sglang')}")
EOF
