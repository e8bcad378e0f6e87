"""Faults end in a clear error or a rebuild for the one request that met them; the service keeps serving."""

from __future__ import annotations

import os

import pytest
import xgrammar as xgr

from pools import UNHURRIED, compile_pool_held
from shared_data import TOKENIZERS
from tagjit import CompileLimitError, CompileService, ConstraintError, Settings, allocate_token_bitmask, load_tokenizer_info
from tagjit.runtime.matcher import allowed_tokens
from tagjit.constraint import Constraint, Kind

GOOD = Constraint.of(Kind.JSON, {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})
EOT = 128009  # Llama-3 <|eot_id|>


def serves(svc: CompileService) -> bool:
    g = svc.grammar(GOOD)
    return g.accept_string('{"ok": true}') and g.is_completed()


def test_failed_jit_compile_lets_that_request_only_stop(llama3_info):
    svc = CompileService(llama3_info, UNHURRIED)
    bad = svc.jit_grammar(Constraint.of(Kind.REGEX, "([a-z]"), stop_token_ids=[EOT])
    bm = allocate_token_bitmask(1, llama3_info.vocab_size)
    bad.fill_bitmask(bm, 0)
    assert allowed_tokens(bm, 0, llama3_info.vocab_size) == [EOT]
    assert isinstance(bad.error, ConstraintError) and "regex" in str(bad.error)
    assert serves(svc)


def test_compile_over_the_time_limit_is_a_limit_error_for_that_request_alone(llama3_info):
    svc = CompileService(llama3_info, UNHURRIED.replace(compile_timeout_s=0.05, compile_threads=1))
    with compile_pool_held(svc), pytest.raises(CompileLimitError, match="did not compile within 0.05 s"):
        svc.compile(GOOD)
    svc.submit(GOOD).result()
    assert serves(svc)


def test_jit_grammar_past_the_time_limit_only_stops(llama3_info):
    svc = CompileService(llama3_info, UNHURRIED.replace(compile_timeout_s=0.05, compile_threads=1))
    with compile_pool_held(svc):
        g = svc.jit_grammar(GOOD, stop_token_ids=[EOT])
        bm = allocate_token_bitmask(1, llama3_info.vocab_size)
        g.fill_bitmask(bm, 0)
    assert allowed_tokens(bm, 0, llama3_info.vocab_size) == [EOT]
    assert g.accept_token(EOT) and g.is_terminated()
    svc.submit(GOOD).result()
    assert serves(svc)


def test_disk_cache_entry_for_another_tokenizer_is_rebuilt(llama3_info, qwen2_info, tmp_path):
    """A payload xgrammar refuses to load (DeserializeFormatError) is discarded and rebuilt."""
    settings = UNHURRIED.replace(disk_cache_dir=str(tmp_path))
    llama = CompileService(llama3_info, settings)
    llama.compile(GOOD)
    (path,) = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs if f.endswith(".json")]
    foreign = xgr.GrammarCompiler(qwen2_info, max_threads=1).compile_json_schema('{"type": "object"}')
    import json

    with open(path) as f:
        entry = json.load(f)
    entry["payload"] = foreign.serialize_json()
    with open(path, "w") as f:
        json.dump(entry, f)
    fresh = CompileService(llama3_info, settings)
    assert serves(fresh)
    assert fresh.disk.corrupt == 1


def test_disk_cache_file_that_is_not_json_is_rebuilt(llama3_info, tmp_path):
    settings = UNHURRIED.replace(disk_cache_dir=str(tmp_path))
    CompileService(llama3_info, settings).compile(GOOD)
    (path,) = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs if f.endswith(".json")]
    with open(path, "wb") as f:
        f.write(b"\xff\xfe\x00garbage")
    fresh = CompileService(llama3_info, settings)
    assert serves(fresh)


def test_structural_tag_naming_a_token_the_vocabulary_lacks_is_a_clear_error(llama3_info):
    svc = CompileService(llama3_info, UNHURRIED)
    tag = {"type": "structural_tag", "format": {"type": "sequence", "elements": [
        {"type": "token", "token": "<tool_call>"}, {"type": "json_schema", "json_schema": {"type": "object"}}]}}
    with pytest.raises(ConstraintError, match="'token' names vocabulary tokens"):
        svc.compile(Constraint.of(Kind.STRUCTURAL_TAG, tag))
    assert serves(svc)


def test_tokenizer_without_the_trigger_token_still_compiles_the_string_level_tag():
    """qwen2's base vocabulary has no <tool_call> token: string triggers work over several tokens."""
    info = load_tokenizer_info(str(TOKENIZERS / "qwen2"))
    svc = CompileService(info, UNHURRIED)
    tag = {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [
        {"type": "tag", "begin": "<tool_call>", "content": {"type": "json_schema", "json_schema": {"type": "object"}},
         "end": "</tool_call>"}]}}
    g = svc.grammar(Constraint.of(Kind.STRUCTURAL_TAG, tag))
    assert g.accept_string('hi <tool_call>{"a": 1}</tool_call>')
