"""StructuredOutputsConfig takes "tagjit" only once the plugin registers, and the installed release is a supported
one (acceptance after register and the version gate: tests/test_vllm_plugin.py, which runs on both releases)."""

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

