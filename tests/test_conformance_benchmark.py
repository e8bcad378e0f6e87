"""benchmarks/conformance.py: its outlines-core backend, its percentile summary, and the mask-fill fields it writes."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from shared_data import SCHEMAS, TOKENIZERS, maskbench
from benchmark_modules import load_benchmark

QWEN2 = str(TOKENIZERS / "qwen2")
LOGIN = "Github_easy---o17544.json"  # a login form: password with minLength 4, maxLength 50
SMALL = [LOGIN, "Glaiveai2K---analyze_health_data_ecfa5553.json"]


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("conformance")


def test_summary_is_median_and_nearest_rank_p99(bench):
    assert bench.summary([float(x) for x in range(100, 0, -1)]) == (50.5, 100.0)
    assert bench.summary([1.0] * 99 + [7.0] * 2) == (1.0, 7.0)  # rank int(0.99 * 101) = 99 of 0..100
    assert bench.summary([3.0]) == (3.0, 3.0)
    assert bench.summary([]) == (None, None)


def test_outlines_core_accepts_a_valid_instance_and_rejects_the_invalid_ones(bench):
    pytest.importorskip("outlines_core")
    compile_ = bench.outlines_backend(QWEN2, "real", timeout_s=60)
    file = maskbench(LOGIN)
    grammar = compile_(file["schema"])
    verdicts = [(t["valid"], grammar.check(bench.instance_text(t["data"]))) for t in file["tests"]]
    assert (True, True) in verdicts
    assert [v for v in verdicts if not v[0]] and all(not ok for valid, ok in verdicts if not valid)


def test_outlines_core_mask_allows_exactly_the_walked_token(bench):
    """A Guide's mask along a valid instance has the instance's next token set, and not the EOS before the end."""
    pytest.importorskip("outlines_core")
    torch = pytest.importorskip("torch")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(QWEN2)
    file = maskbench(LOGIN)
    grammar = bench.outlines_backend(QWEN2, "real", timeout_s=60)(file["schema"])
    text = bench.instance_text(next(t["data"] for t in file["tests"] if t["valid"]))
    guide = grammar.matcher()
    mask = torch.zeros((tok.eos_token_id + 1 + 31) // 32, dtype=torch.int32)
    for t in tok.encode(text, add_special_tokens=False):
        guide.write_mask_into(mask.data_ptr(), mask.numel(), mask.element_size())
        bit = lambda i: bool((int(mask[i // 32]) >> (i % 32)) & 1)  # noqa: E731
        assert bit(t) and not bit(tok.eos_token_id)
        assert grammar.accept(guide, t)
    assert guide.is_finished()


def test_outlines_core_refusal_names_the_schema_problem(bench):
    pytest.importorskip("outlines_core")
    compile_ = bench.outlines_backend(QWEN2, "empty", timeout_s=60)
    with pytest.raises(bench.Refused, match="^Unsupported JSON Schema structure$"):
        compile_({"type": "object", "properties": {"a": {"not": {"type": "string"}}}, "required": ["a"]})
    with pytest.raises(bench.Refused, match="^Invalid reference path$"):
        compile_({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}, "required": ["a"]})


def test_json_has_compile_and_mask_fill_numbers_for_every_backend(bench, tmp_path, monkeypatch):
    data = tmp_path / "data"
    (data / "jsonschemabench" / "maskbench").mkdir(parents=True)
    for name in SMALL:  # links, not copies, to two quick schemas
        (data / "jsonschemabench" / "maskbench" / name).symlink_to(SCHEMAS / "maskbench" / name)
    monkeypatch.setattr(bench, "DATA", data)
    out, png = tmp_path / "conf.json", tmp_path / "conf.png"
    assert bench.main(["--limit", "2", "--splits", "maskbench", "--vocab", "real", "--mask-schemas", "1",
                       "--tokenizer", QWEN2, "--json", str(out), "--plot", str(png)]) == 0
    rows = json.loads(out.read_text())["results"]["maskbench"]
    expected = {"tagjit", "tagjit-lenient", "tagjit-any-order", "xgrammar", "xgrammar-lenient", "llguidance"} | (
        {"outlines-core"} if _has("outlines_core") else set())
    assert set(rows) == expected
    for backend, row in rows.items():
        assert row["schemas"] == 2 and row["compiled"] == 2, backend
        assert row["median_compile_ms"] > 0 and row["p99_compile_ms"] >= row["median_compile_ms"], backend
        assert row["mask_schemas"] == 1 and row["fill_steps"] > 0, backend
        assert 0 < row["median_fill_us"] <= row["p99_fill_us"], backend
    assert rows["tagjit"]["completeness"] == 1.0  # instances printed in the spacing tagjit generates
    assert png.stat().st_size > 0


def test_empty_vocabulary_times_no_mask_fill(bench, tmp_path, monkeypatch):
    data = tmp_path / "data"
    (data / "jsonschemabench" / "maskbench").mkdir(parents=True)
    (data / "jsonschemabench" / "maskbench" / LOGIN).symlink_to(SCHEMAS / "maskbench" / LOGIN)
    monkeypatch.setattr(bench, "DATA", data)
    out = tmp_path / "conf.json"
    assert bench.main(["--splits", "maskbench", "--vocab", "empty", "--backends", "tagjit,outlines-core",
                       "--tokenizer", QWEN2, "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]["maskbench"]
    assert all(r["fill_steps"] == 0 and r["median_fill_us"] is None for r in rows.values())
    assert rows["tagjit"]["soundness"] == 1.0


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def test_an_outlines_core_index_that_grows_without_bound_is_stopped_at_its_memory_limit(bench):
    pytest.importorskip("outlines_core")
    vocabulary, _, _ = bench.byte_vocabulary()
    index, ms = bench.build_index("[a-z]{1,5}x", vocabulary, timeout_s=30, memory_bytes=1 << 30)
    assert index.get_next_state(index.get_initial_state(), ord("q")) is not None and ms > 0
    with pytest.raises((MemoryError, RuntimeError)):  # a DFA of 2^22 states: far more than 64 MiB
        bench.build_index("(a|b)*a(a|b){22}", vocabulary, timeout_s=600, memory_bytes=64 << 20)


def test_lenient_backends_take_the_undeclared_names_json_schema_allows(bench):
    import xgrammar as xgr

    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    info = xgr.TokenizerInfo([])
    for strict, lenient in ((bench.tagjit_backend(info), bench.tagjit_backend(info, strict=False)),
                            (bench.xgrammar_backend(info), bench.xgrammar_backend(info, strict=False))):
        assert not strict(schema).check('{"a": 1, "b": 2}')
        assert lenient(schema).check('{"a": 1, "b": 2}')
