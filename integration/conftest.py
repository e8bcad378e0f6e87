"""Fixtures that start real engine servers (session-scoped: one start per test run)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
# The servers the tests start compile without a limit the machine's load could reach (the limit has its own tests).
os.environ.setdefault("TAGJIT_COMPILE_TIMEOUT_S", "3600")

from server import closer_bias, vllm_server  # noqa: E402


def pytest_collection_modifyitems(items: list) -> None:
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def vllm_url() -> str:
    """A ``vllm serve`` with tagjit and the hermes tool parser."""
    with vllm_server("tagjit", "--enable-auto-tool-choice", "--tool-call-parser", "hermes") as url:
        yield url


@pytest.fixture(scope="session")
def client(vllm_url: str):
    """An OpenAI client for the tagjit server."""
    from openai import OpenAI

    return OpenAI(base_url=vllm_url + "/v1", api_key="none", max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def bias() -> dict[str, float]:
    """The closing-character logit bias every request in the suite uses."""
    return closer_bias()
