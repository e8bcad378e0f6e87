"""The vLLM plugin's registration: idempotent, and off (with one log line) outside the supported versions."""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("vllm")


# What tagjit's plugin hands the processes a server starts: a fresh process must not inherit it from this one.
HANDED_DOWN = ("TAGJIT_VLLM_SELECTED", "TAGJIT_VLLM_COMPACT", "TAGJIT_METRICS_DIR")


def run(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in HANDED_DOWN}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
                          env=env)


def test_register_makes_tagjit_a_valid_backend_and_is_idempotent():
    r = run("""
        import tagjit_vllm
        tagjit_vllm.register(); tagjit_vllm.register()
        from vllm.config.structured_outputs import StructuredOutputsConfig
        import typing
        print(StructuredOutputsConfig(backend="tagjit").backend)
        print(typing.get_args(StructuredOutputsConfig.__dataclass_fields__["backend"].type).count("tagjit"))
        print(StructuredOutputsConfig(backend="xgrammar").backend)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["tagjit", "1", "xgrammar"]


def test_unsupported_vllm_version_logs_once_and_stays_off():
    r = run("""
        import logging, vllm
        logging.basicConfig(level=logging.INFO)
        vllm.__version__ = "0.99.0"
        import tagjit_vllm
        tagjit_vllm.register(); tagjit_vllm.register()
        from vllm.config.structured_outputs import StructuredOutputsConfig
        try:
            StructuredOutputsConfig(backend="tagjit")
            print("accepted")
        except Exception:
            print("rejected")
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["rejected"]
    assert r.stderr.count("outside the supported range") == 1


def test_disable_any_whitespace_is_allowed_with_tagjit_in_the_engine_config():
    # VllmConfig validates the nested config again with its own copy of the validators (vllm serve failed here).
    r = run("""
        import os
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        import tagjit_vllm
        tagjit_vllm.register()
        from vllm.config.structured_outputs import StructuredOutputsConfig
        from vllm.config.vllm import VllmConfig
        config = StructuredOutputsConfig(backend="tagjit", disable_any_whitespace=True)
        print(config.disable_any_whitespace, VllmConfig(structured_outputs_config=config).structured_outputs_config.backend)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-2:] == ["True", "tagjit"]


@pytest.mark.parametrize("switch, patched", [("1", True), ("0", False)])
def test_tagjit_vllm_apply_switch_decides_who_applies_bitmasks(switch, patched):
    r = run(f"""
        import os
        os.environ["TAGJIT_VLLM_APPLY"] = "{switch}"
        import tagjit_vllm
        tagjit_vllm.register()
        from vllm.v1.structured_output import utils
        print(type(utils.xgr).__name__ == "_Xgrammar")
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(patched)]


def test_a_patch_that_fails_leaves_vllm_as_it_was():
    r = run("""
        import logging
        logging.basicConfig(level=logging.INFO)
        from tagjit_vllm import patches

        def broken():
            raise RuntimeError("injected: this vLLM moved the scheduler")

        patches.patch_scheduler_requests = broken  # the last backend patch fails after the others applied
        import tagjit_vllm
        from vllm.sampling_params import SamplingParams
        from vllm.v1.structured_output import StructuredOutputManager
        before = (SamplingParams._validate_structured_outputs, StructuredOutputManager.grammar_init,
                  StructuredOutputManager.__init__)
        tagjit_vllm.register()
        from vllm.config.structured_outputs import StructuredOutputsConfig
        try:
            StructuredOutputsConfig(backend="tagjit")
            print("accepted")
        except Exception:
            print("rejected")
        after = (SamplingParams._validate_structured_outputs, StructuredOutputManager.grammar_init,
                 StructuredOutputManager.__init__)
        print(all(a is b for a, b in zip(before, after)))
        print(StructuredOutputsConfig(backend="xgrammar").backend)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["rejected", "True", "xgrammar"]
    assert r.stderr.count("could not install into vLLM") == 1


@pytest.mark.parametrize("backend, selected", [("tagjit", "True"), ("xgrammar", "False")])
def test_processes_a_server_starts_know_whether_it_selected_tagjit(backend, selected):
    # vLLM hands its config to the API servers, engine cores and workers it starts without validating it
    # again: the selection reaches them through the environment they inherit.
    r = run(f"""
        import subprocess, sys
        import tagjit_vllm
        tagjit_vllm.register()
        from vllm.config.structured_outputs import StructuredOutputsConfig
        StructuredOutputsConfig(backend="{backend}", disable_any_whitespace=True)
        child = subprocess.run([sys.executable, "-c",
                                "from tagjit_vllm import patches; print(patches.active(), "
                                "patches.server_settings().max_whitespace == 0)"],
                               capture_output=True, text=True, check=True)
        print(child.stdout.strip())
    """)
    assert r.returncode == 0, r.stderr
    compact = selected
    assert r.stdout.split() == [selected, compact]


@pytest.mark.parametrize("backend, shown", [("tagjit", "True"), ("xgrammar", "False")])
def test_tagjit_metrics_appear_only_on_a_server_that_selected_tagjit(backend, shown):
    r = run(f"""
        import os
        import tagjit_vllm
        tagjit_vllm.register()
        from prometheus_client import REGISTRY, generate_latest
        from vllm.config.structured_outputs import StructuredOutputsConfig
        StructuredOutputsConfig(backend="{backend}")
        print("tagjit_constraint_errors" in generate_latest(REGISTRY).decode(), "TAGJIT_METRICS_DIR" in os.environ)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [shown, shown]
