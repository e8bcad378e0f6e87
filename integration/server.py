"""Start a real ``vllm serve`` on 127.0.0.1 with a tiny random model, for tests, demo and benchmarks."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any, Iterator

from tagjit.compile.pools import parse_cpus
from tiny_model import build

# What tagjit's plugin hands the processes of one server (its selection, its metrics directory): a server started
# here is a deployment of its own, whatever this process selected before.
HANDED_DOWN = ("TAGJIT_VLLM_SELECTED", "TAGJIT_VLLM_COMPACT", "TAGJIT_METRICS_DIR")
MODEL_DIR = os.environ.get("TAGJIT_TINY_MODEL", os.path.join(tempfile.gettempdir(), "tagjit-tiny-llama"))
# Tokens made of closing characters, favoured so a random model closes its strings and objects.
CLOSERS = ('"', "}", "]", '"}', '"]', "}]", "]}", '"}]')


def add_cpu_options(parser: Any) -> None:
    """The ``--model-cpus``/``--serving-cpus`` options of the benchmarks (see ``vllm_server``)."""
    parser.add_argument("--model-cpus", help="bind the model's forward pass to these CPUs (Linux list), e.g. 0")
    parser.add_argument("--serving-cpus", help="confine every other thread of the server (API server, engine core, "
                        "grammar compiles of any backend) to these CPUs, e.g. 1; needs --model-cpus")


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vllm_command() -> list[str]:
    """The ``vllm`` CLI of the running interpreter's environment."""
    exe = os.path.join(os.path.dirname(sys.executable), "vllm")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "vllm.entrypoints.cli.main"]


@contextlib.contextmanager
def vllm_server(backend: str = "tagjit", *extra: str, model_dir: str | None = None, served_name: str = "tiny",
                env: dict | None = None, log_path: str | None = None, timeout_s: float = 300.0,
                model_cpus: str | None = None, serving_cpus: str | None = None) -> Iterator[str]:
    """Run ``vllm serve`` with a structured-output backend; yields the base URL (``http://127.0.0.1:PORT``).

    ``model_cpus`` (a Linux CPU list) binds the model worker's forward pass there (``VLLM_CPU_OMP_THREADS_BIND``);
    ``serving_cpus`` confines every other process and thread of the server (API server, engine core, grammar
    compiles of any backend) to its CPUs, as on a host where an accelerator runs the forward pass.
    """
    if serving_cpus and not model_cpus:
        raise ValueError("serving_cpus needs model_cpus (else the model worker inherits the serving CPUs)")
    model = model_dir or build(MODEL_DIR)
    port = free_port()
    cmd = [*vllm_command(), "serve", model, "--host", "127.0.0.1", "--port", str(port),
           "--served-model-name", served_name, "--max-model-len", "4096", "--max-num-seqs", "16",
           "--dtype", "bfloat16", "--structured-outputs-config.backend", backend, *extra]
    inherited = {k: v for k, v in os.environ.items() if k not in HANDED_DOWN}
    full_env = {**inherited, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "INFO",
                "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
                **({"VLLM_CPU_OMP_THREADS_BIND": model_cpus} if model_cpus else {}), **(env or {})}
    log = open(log_path, "w") if log_path else tempfile.NamedTemporaryFile("w", prefix="vllm-", suffix=".log",
                                                                          delete=False)
    cpus = parse_cpus(serving_cpus) if serving_cpus else None
    confine = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env, start_new_session=True,
                            preexec_fn=confine)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {proc.returncode}; log: {log.name}\n" + _tail(log.name))
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"vllm serve not healthy after {timeout_s:.0f} s; log: {log.name}\n"
                                   + _tail(log.name))
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        log.close()


def _tail(path: str, n: int = 60) -> str:
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-n:])


def closer_bias(tokenizer_dir: str | None = None, strength: float = 6.0) -> dict[str, float]:
    """``logit_bias`` favouring tokens made only of closing characters (same for every backend)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir or build(MODEL_DIR))
    bias: dict[str, float] = {}
    for text, idx in tok.get_vocab().items():
        clean = text.replace("▁", "")
        if clean and clean in CLOSERS:
            bias[str(idx)] = strength
    return bias
