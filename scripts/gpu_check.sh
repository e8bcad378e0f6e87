#!/usr/bin/env bash
# The GPU check: on a CUDA host that reaches the package index, install vLLM (GPU wheel, default 0.33.0) and
# tagjit in a fresh venv, serve the tiny model with tagjit on the GPU (the demo), run the integration suite
# (each test starts its own `vllm serve`, here on the GPU), the bitmask unit tests (the CUDA-only ones run
# here) and `benchmarks/bitmask.py --quick`. Everything it prints is also written under OUT.
#
#   scripts/gpu_check.sh [OUT]          OUT defaults to benchmarks/out/gpu
#   VLLM_VERSION=0.32.0 scripts/gpu_check.sh   the other supported release
#   WHEELHOUSE=/path scripts/gpu_check.sh       install from a folder of wheels, no index (offline hosts)
#
# Exit status: non-zero if any step failed; the summary at the end names each step's result.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/benchmarks/out/gpu}"
VENV="${GPU_VENV:-$ROOT/.venv-gpu}"
VLLM_VERSION="${VLLM_VERSION:-0.33.0}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
cd "$ROOT"

declare -a SUMMARY=()
failed=0
step() {  # step NAME COMMAND...: run, tee the output to OUT/NAME.log, record the result
    local name="$1"; shift
    echo "== $name: $*"
    if "$@" 2>&1 | tee "$OUT/$name.log"; then
        SUMMARY+=("ok      $name")
    else
        SUMMARY+=("FAILED  $name (log: $OUT/$name.log)")
        failed=1
    fi
}

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv \
    | tee "$OUT/gpu.txt"

pip_args=(--disable-pip-version-check -q)
[ -n "${WHEELHOUSE:-}" ] && pip_args+=(--no-index --find-links "$WHEELHOUSE")
install() {
    [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install "${pip_args[@]}" "vllm==$VLLM_VERSION" \
        && "$VENV/bin/python" -m pip install "${pip_args[@]}" -e "$ROOT[test,bench]" \
        && "$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import torch
assert torch.cuda.is_available(), "torch in this venv does not see a CUDA GPU"
print(f"vllm {md.version('vllm')}, torch {torch.__version__}, xgrammar {md.version('xgrammar')}, "
      f"tagjit {md.version('tagjit')}, GPU {torch.cuda.get_device_name()}")
EOF
}
step install install || true
if [ "$failed" = 1 ]; then
    printf '%s\n' "${SUMMARY[@]}"
    exit 1
fi

VPY="$VENV/bin/python"
# tagjit active on this vLLM (the plugin logs and stays off outside the supported releases).
step plugin "$VPY" -c 'import tagjit_vllm; tagjit_vllm.register(); from vllm.config.structured_outputs import StructuredOutputsConfig as C; print("tagjit backend:", C(backend="tagjit").backend)'
step demo "$VPY" integration/demo.py
step integration "$VPY" -m pytest -q -p no:cacheprovider integration
step kernels "$VPY" -m pytest -q -p no:cacheprovider tests/test_bitmask.py tests/test_vllm_apply.py \
    tests/vllm_classes/test_mrv2_kernel.py
step bitmask "$VPY" benchmarks/bitmask.py --quick --json "$OUT/bitmask.json"

echo "== summary (vLLM $VLLM_VERSION; logs in $OUT)"
printf '%s\n' "${SUMMARY[@]}" | tee "$OUT/summary.txt"
exit "$failed"
