"""tagjit inside SGLang 0.5.23: plugin loading, the grammar manager, scheduler-side grammar calls.

Every scenario runs in a spawned process that starts like SGLang's scheduler (``load_plugins()``
first), with SGLang's real GrammarManager, Req, GrammarMask and xgrammar backend, the real Qwen2
tokenizer and real schemas and tools from ../shared/data. Needs ``.venv-sglang``
(``scripts/setup_sglang.sh``); skipped where SGLang is not installed.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

# A module inside SGLang: the bare name "sglang" would also find this test folder (a namespace package).
pytest.importorskip("sglang.srt.constrained.grammar_manager",
                    reason="SGLang is not installed here (run in .venv-sglang: scripts/setup_sglang.sh)")

pytestmark = pytest.mark.sglang
HERE = Path(__file__).resolve().parent
DATA = Path(os.environ.get("TAGJIT_SHARED_DATA", HERE.parents[2] / "shared" / "data"))

OBJECT = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
          "required": ["city", "days"]}
MASKBENCH = ["BFCL_simple_10.json", "BFCL_simple_142.json", "BFCL_multiple_8.json", "BFCL_parallel_53.json",
             "Github_easy---o10008.json", "Github_easy---o10009.json"]


@pytest.fixture(scope="module")
def scheduler():
    """One spawned scheduler-side process for the module, with tagjit loaded by SGLang's plugin loader."""
    sys.path.insert(0, str(HERE))  # spawned children import scheduler_side / scenarios from here
    ctx = multiprocessing.get_context("spawn")
    import scheduler_side

    with ProcessPoolExecutor(1, mp_context=ctx, initializer=scheduler_side.init) as pool:
        import scenarios

        yield lambda fn, *a, **kw: pool.submit(getattr(scenarios, fn), *a, **kw).result(timeout=300)


def bfcl_tools(n: int) -> list[dict]:
    """The first n BFCL functions as OpenAI tools (tagjit's converter)."""
    from tagjit.tools.bfcl import load_tools

    return load_tools(str(DATA / "bfcl"), count=n)


def test_plugin_adds_tagjit_to_sglang_cli_once(scheduler):
    r = scheduler("cli_choices_after_two_registrations")
    assert r["choices"].count("tagjit") == 1 and r["count"] == 1
    assert r["parsed"] == "tagjit" and r["registered"]


def test_sglang_factory_builds_the_tagjit_backend(scheduler):
    assert scheduler("backend_class") == "TagjitGrammarBackend"


def test_the_backend_sglang_builds_is_prepared_before_its_first_request(scheduler):
    assert scheduler("prepared_steps") == ["json", "kernel", "tables", "tool_tag"]


def test_bad_constraints_abort_only_their_requests(scheduler):
    out = scheduler("admit_mixed", [
        {"json_schema": json.dumps(OBJECT)},
        {"json_schema": json.dumps({"type": "object", "properties": {"a": {"type": "nonsense"}}})},
        {"regex": "(ab"},
        {"ebnf": 'root ::= "a" missing_rule'},
        {"structural_tag": json.dumps({"format": {"type": "no_such_format"}})},
        {"regex": r"\d{3}"},
    ])
    assert [o["grammar"] for o in (out[0], out[5])] == ["TagjitGrammar", "TagjitGrammar"]
    assert out[0]["abort"] is None and out[5]["abort"] is None
    for bad, kind in zip(out[1:5], ["json", "regex", "ebnf", "structural_tag"]):
        assert bad["grammar"] is None and bad["abort"].startswith(f"Failed to compile {kind} grammar: ")


def test_maskbench_valid_instances_pass_and_invalid_fail(scheduler):
    results = scheduler("maskbench", MASKBENCH)
    compiled = [r for r in results if r["grammar"] == "TagjitGrammar"]
    assert len({r["file"] for r in compiled}) >= 4
    wrong = [r for r in compiled if r["accepted"] != r["valid"]]
    assert not wrong, wrong
    # A schema tagjit cannot enforce exactly is refused with the feature named, never loosened.
    for r in results:
        if r["grammar"] is None:
            assert "unsupported JSON Schema feature" in r["abort"], r


@pytest.mark.parametrize("constraint,text", [
    ({"regex": r"(yes|no), \d+"}, "no, 42"),
    ({"ebnf": 'root ::= "{" ("\\"a\\"" | "\\"b\\"") "}"'}, '{"b"}'),
    ({"json_schema": "$$ANY$$"}, '{"any": [1, 2]}'),
])
def test_regex_ebnf_and_json_object_walk_to_termination(scheduler, constraint, text):
    r = scheduler("walk", constraint, text)
    assert r == {"error": None, "terminated": True, "grammar": "TagjitGrammar"}


def test_structural_tag_format_and_legacy_forms_compile_and_walk(scheduler):
    content = {"type": "json_schema", "json_schema": OBJECT}
    new = {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [
        {"type": "tag", "begin": "<tool_call>", "content": content, "end": "</tool_call>"}]}}
    legacy = {"structures": [{"begin": "<tool_call>", "schema": OBJECT, "end": "</tool_call>"}],
              "triggers": ["<tool_call>"]}
    text = 'Sure. <tool_call>{"city": "Oslo", "days": 3}</tool_call>'
    for tag in (new, legacy):
        assert scheduler("walk", {"structural_tag": json.dumps(tag)}, text)["error"] is None


def test_copy_is_fresh_and_unadvanced(scheduler):
    r = scheduler("copy_is_fresh", {"json_schema": json.dumps(OBJECT)}, '{"city": "Os')
    assert r["copy_equals_initial"] and r["advanced_differs"] and r["copy_accepts_prefix"]
    assert r["original_tokens"] > 0


def test_rejected_token_raises_value_error(scheduler):
    r = scheduler("rejected_token", {"json_schema": json.dumps(OBJECT)}, '{"days": 3}')
    assert r["type"] == "ValueError" and "rejected" in r["message"]


def test_masks_equal_sglang_xgrammar_backend_at_every_step(scheduler):
    r = scheduler("masks_vs_xgrammar", {"regex": r"[a-z]+@[a-z]+\.(com|org)"}, "ada@example.org", 8)
    assert r["steps"] > 3 and r["differing"] == [] and r["both_terminated"]


def test_json_masks_equal_sglang_xgrammar_backend_but_for_whitespace_before_separators(scheduler):
    r = scheduler("masks_vs_xgrammar", {"json_schema": json.dumps(OBJECT)}, '{"city": "Oslo",\n  "days": 14}', 8)
    assert r["steps"] > 3 and r["both_terminated"]
    assert r["differing"] and r["subset"] and r["whitespace"]


def test_a_mask_step_fills_every_tagjit_row_in_one_core_call_with_the_per_row_masks(scheduler):
    constraints = [{"json_schema": json.dumps(OBJECT)}, {"regex": r"[a-z]+@[a-z]+\.(com|org)"},
                   {"json_schema": json.dumps(OBJECT)}]
    r = scheduler("batched_fill", constraints, ["", "ada@", '{"city": "Os'])
    assert r["equal"] and r["calls"] == [3] and r["constrained_rows"] == 3


def test_sglang_grammar_mask_apply_matches_xgrammar(scheduler):
    assert scheduler("apply_matches_xgrammar", {"json_schema": json.dumps(OBJECT)})


def test_reasoning_request_is_free_until_think_end_then_constrained(scheduler):
    r = scheduler("reasoning", {"json_schema": json.dumps(OBJECT)}, "Let me think: Oslo, {not json} 3 days.",
                  '{"city": "Oslo", "days": 3}', True)
    assert r["think_end_ids"] == r["end_tokens"] and len(r["end_tokens"]) > 1  # </think> is 3 qwen2 tokens
    assert r["free_before"] and r["think_error"] is None and r["end_error"] is None
    assert r["constrained_after"] and r["answer_error"] is None and r["terminated"]


def test_request_without_reasoning_is_constrained_from_the_first_token(scheduler):
    r = scheduler("reasoning", {"json_schema": json.dumps(OBJECT)}, "Let me think", "", False)
    assert not r["free_before"] and r["think_error"] is not None


def test_long_prompt_gets_jit_grammar_and_repeat_skips_queue(scheduler):
    schema = {"type": "object", "properties": {"id": {"type": "string", "pattern": "^[A-Z]{3}[0-9]{4}$"}},
              "required": ["id"]}
    r = scheduler("jit_and_wait", {"json_schema": json.dumps(schema)})
    assert r["long_jit"] and r["first_mask_exact"]
    assert r["repeat_queued"] is False and r["repeat_jit"] is False


def test_short_prompt_with_costly_compile_waits_in_sglang_queue(scheduler):
    schema = {"type": "object", "properties": {"note": {"type": "string", "maxLength": 17}}, "required": ["note"]}
    r = scheduler("short_prompt_waits", {"json_schema": json.dumps(schema)})
    assert r == {"queued": True, "jit": False, "ready": True}


def test_sglang_qwen25_required_tool_tag_accepts_a_call(scheduler):
    tools = bfcl_tools(20)
    name = tools[3]["function"]["name"]
    call = f'<tool_call>\n{{"name":"{name}", "arguments":{{"a": 1, "b": 2, "c": 3}}}}\n</tool_call>'
    r = scheduler("sglang_tool_tag", "qwen25", tools, "required", call)
    assert r == {"kind": "structural_tag", "error": None, "terminated": True, "grammar": "TagjitGrammar"}


def test_sglang_required_tool_tag_forbids_ending_without_a_call(scheduler):
    r = scheduler("sglang_tool_tag", "qwen25", bfcl_tools(20), "required", "No tool needed.")
    assert r["error"] is not None and not r["terminated"]


def test_tagjit_hermes_tool_tag_runs_through_sglang(scheduler):
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": OBJECT}}
    r = scheduler("tagjit_tool_tag", "hermes", [tool], "required",
                  '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>')
    assert r["error"] is None and r["terminated"]
