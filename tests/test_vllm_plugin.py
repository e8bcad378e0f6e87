"""The vLLM plugin's registration: idempotent, and off (with one log line) outside the supported versions."""

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("vllm")


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)


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


def test_disable_any_whitespace_is_allowed_with_tagjit():
    r = run("""
        import tagjit_vllm
        tagjit_vllm.register()
        from vllm.config.structured_outputs import StructuredOutputsConfig
        print(StructuredOutputsConfig(backend="tagjit", disable_any_whitespace=True).disable_any_whitespace)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True"]


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
