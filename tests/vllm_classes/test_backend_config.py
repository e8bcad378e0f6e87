"""StructuredOutputsConfig takes "tagjit" once the plugin registers, on supported vLLM releases only."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from vllm_support import vllm_version

pytest.importorskip("vllm")


def run(code: str) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter (plugin registration is once per process)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=False)


def test_tagjit_is_accepted_after_register_and_xgrammar_still_is():
    r = run("""
        import logging
        logging.basicConfig(level=logging.INFO)
        import tagjit_vllm
        tagjit_vllm.register(); tagjit_vllm.register()
        from vllm.config.structured_outputs import StructuredOutputsConfig
        print(StructuredOutputsConfig(backend="tagjit").backend)
        print(StructuredOutputsConfig(backend="xgrammar").backend)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["tagjit", "xgrammar"]
    assert "outside the supported range" not in r.stderr


def test_the_installed_vllm_release_is_a_supported_one():
    import tagjit_vllm

    assert vllm_version() in tagjit_vllm.SUPPORTED


def test_tagjit_is_refused_before_register():
    r = run("""
        from vllm.config.structured_outputs import StructuredOutputsConfig
        try:
            StructuredOutputsConfig(backend="tagjit")
            print("accepted")
        except Exception:
            print("rejected")
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["rejected"]


def test_an_unsupported_vllm_version_keeps_tagjit_off_with_one_log_line():
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
        print(StructuredOutputsConfig(backend="xgrammar").backend)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["rejected", "xgrammar"]
    assert r.stderr.count("outside the supported range") == 1
