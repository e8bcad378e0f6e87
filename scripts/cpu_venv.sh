# Sourced by the setup scripts of the engine test venvs: makes "$VENV" (if missing) with the CPU build of
# torch 2.13.0, defines `pip` for it and "$constraints", a constraint file that keeps that torch in every
# later install. The CPU wheel comes from pip's find-links (this workplace's /opt/wheels; a space-separated
# list is searched in turn) or, failing that, from TORCH_INDEX (default: PyTorch's CPU index).
# Needs: VENV; optional: PYTHON, TORCH_INDEX, PIP_FIND_LINKS.

PY="${PYTHON:-python3}"
TORCH_INDEX="${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }

constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
echo "torch==2.13.0" >"$constraints"  # nothing may replace the CPU torch

if ! "$VENV/bin/python" -c 'import torch, sys; sys.exit(torch.__version__ != "2.13.0+cpu")' 2>/dev/null; then
    wheels=""
    for dir in ${PIP_FIND_LINKS:-/opt/wheels}; do
        if compgen -G "$dir/torch-2.13.0+cpu-*.whl" >/dev/null; then wheels="$dir"; break; fi
    done
    if [ -n "$wheels" ]; then
        pip install --find-links "$wheels" "torch==2.13.0+cpu"
    else
        pip install "torch==2.13.0" --index-url "$TORCH_INDEX"
    fi
fi
