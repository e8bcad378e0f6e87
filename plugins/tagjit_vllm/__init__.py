"""vLLM general plugin: makes ``--structured-outputs-config.backend tagjit`` a real backend.

vLLM 0.32 and 0.33 have no registry of structured-output backends, so this plugin patches three places,
idempotently, in every process vLLM starts (``vllm.general_plugins`` runs in the CLI, each API
server, the engine core and the workers):

1. ``StructuredOutputsConfig.backend`` accepts ``"tagjit"`` (its Literal type, then a pydantic rebuild).
2. ``SamplingParams._validate_structured_outputs``: requests are validated by tagjit in the API
   server, so a bad schema, regex, grammar or tag is an HTTP 400 before it reaches the engine.
3. ``StructuredOutputManager.grammar_init``: creates tagjit's backend and lets the JIT policy put
   the request into prefill at once while its grammar compiles.
"""

from __future__ import annotations

import importlib
import logging
import os

log = logging.getLogger("tagjit")

NAME = "tagjit"
SUPPORTED = ((0, 32), (0, 33))  # vLLM minor versions whose internals these patches were written against
_installed = False


def _version_ok() -> bool:
    try:
        import vllm
    except ImportError:
        return False
    parts = str(getattr(vllm, "__version__", "0.0")).split(".")
    try:
        major_minor = (int(parts[0]), int(parts[1]))
    except (ValueError, IndexError):
        major_minor = (0, 0)
    if major_minor not in SUPPORTED:
        log.warning("tagjit: vLLM %s is outside the supported range (0.32.x, 0.33.x); tagjit stays off",
                    getattr(vllm, "__version__", "?"))
        return False
    return True


METRICS_DIR_ENV = "TAGJIT_METRICS_DIR"


def _metrics_dir() -> str:
    """A directory for metric snapshots, made by the first vLLM process and inherited by its children."""
    directory = os.environ.get(METRICS_DIR_ENV)
    if not directory:
        import atexit
        import shutil
        import tempfile

        directory = os.environ[METRICS_DIR_ENV] = tempfile.mkdtemp(prefix="tagjit-metrics-")
        atexit.register(shutil.rmtree, directory, True)
    # Serve engine-core metrics on this process's /metrics (single API server: the default registry). With several
    # API servers vLLM serves PROMETHEUS_MULTIPROC_DIR's files instead and this collector is idle (tagjit.metrics).
    try:
        from prometheus_client import REGISTRY

        from tagjit.engine import MergedCollector

        REGISTRY.register(MergedCollector(directory))
    except Exception:
        log.exception("tagjit: metrics will not appear on /metrics")
    return directory


def _route_logs() -> None:
    """tagjit's log lines go where vLLM's go, at vLLM's level and in its format: the "tagjit" logger becomes a
    child of the "vllm" logger, whose handlers vLLM configures (possibly after plugins load)."""
    if log.parent is logging.root:
        log.parent = logging.getLogger("vllm")


def register() -> None:
    """Entry point of ``vllm.general_plugins``: install tagjit into this vLLM process."""
    global _installed
    if _installed:
        return
    _installed = True
    if not _version_ok():
        return
    from tagjit.engine import get_settings

    settings = get_settings()  # a bad TAGJIT_* value stops vLLM here, naming the variable
    _route_logs()
    try:
        from . import patches

        patches.install()
    except Exception:  # never take vLLM down: the other backends keep working
        log.exception("tagjit: could not install into vLLM; tagjit stays off")
        return
    patches.when_selected(_metrics_dir)  # a server on another backend shows no tagjit metrics
    # TAGJIT_VLLM_APPLY=0 keeps vLLM's own bitmask application, TAGJIT_VLLM_TOOLS=0 its tool tags.
    for hooks, wanted in (("apply", settings.vllm_apply), ("tools", settings.vllm_tools)):
        if not wanted:
            continue
        try:
            importlib.import_module(f"{__name__}.{hooks}").install()
        except Exception:
            log.exception("tagjit: could not install its %s hooks; continuing without them", hooks)
