"""json_style=dumps (the default): JSON spaced exactly as json.dumps and chat templates' tojson write it, and
nothing else."""

import json
from pathlib import Path

import pytest
import xgrammar as xgr

from tagjit import CompileService, Matcher, Settings
from tagjit.build.grammars import build_grammar
from tagjit.compile.cache import grammar_salt
from tagjit.constraint import Constraint, Kind
from tagjit.errors import ConstraintError
from pools import UNHURRIED
from shared_data import DATA
from tool_calls import hermes_call_verdicts

DUMPS = UNHURRIED.replace(json_style="dumps")
SCHEMA = {"type": "object", "required": ["a", "b"],
          "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "string"}}}}


@pytest.fixture(scope="module")
def dumps_service(llama3_info) -> CompileService:
    return CompileService(llama3_info, DUMPS)


def accepts(service: CompileService, schema: dict, text: str) -> bool:
    g = Matcher(service.compile(Constraint.of(Kind.JSON, schema)), vocab_size=service.vocab_size)
    return g.accept_string(text) and g.is_completed()


def test_json_dumps_spacing_is_accepted(dumps_service):
    assert accepts(dumps_service, SCHEMA, json.dumps({"a": 1, "b": ["x", "y"]}))


@pytest.mark.parametrize("text", ['{"a":1,"b":["x"]}', '{"a": 1,"b": ["x"]}', '{ "a": 1, "b": ["x"]}',
                                  '{"a": 1, "b": ["x"] }', '{"a": 1,\n"b": ["x"]}', '{"a": 1, "b": ["x",  "y"]}'],
                         ids=["compact", "no space after comma", "space after brace", "space before brace",
                              "newline", "two spaces"])
def test_any_other_spacing_is_refused(dumps_service, text):
    assert not accepts(dumps_service, SCHEMA, text)


def test_compact_json_wins_over_dumps(llama3_info):
    compact = CompileService(llama3_info, DUMPS.replace(max_whitespace=0))
    assert accepts(compact, SCHEMA, '{"a":1,"b":["x"]}')
    assert not accepts(compact, SCHEMA, '{"a": 1, "b": ["x"]}')


def test_json_object_requests_take_dumps_spacing(dumps_service):
    c = Constraint.of(Kind.JSON_OBJECT, "")
    verdicts = []
    for text in ('{"k": [1, 2], "v": {"w": null}}', '{"k":[1,2]}'):
        g = Matcher(dumps_service.compile(c), vocab_size=dumps_service.vocab_size)
        verdicts.append(g.accept_string(text) and g.is_completed())
    assert verdicts == [True, False]


def test_any_order_objects_take_dumps_spacing_in_any_order(dumps_service):
    person = {"type": "object", "x-any-order": True, "required": ["name", "age"],
              "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}
    assert accepts(dumps_service, person, '{"age": 1, "name": "a"}')
    assert not accepts(dumps_service, person, '{"age":1,"name":"a"}')
    assert not accepts(dumps_service, person, '{ "age": 1, "name": "a"}')


@pytest.mark.parametrize("whole", [False, True], ids=["per-tool parts", "whole tag"])
def test_tool_call_arguments_take_exactly_the_spacing_chat_templates_write(dumps_service, whole):
    arguments = [json.dumps({"base": 1, "height": 2}), '{"base":1,"height":2}', '{"base": 1, "height": 2 }']
    assert hermes_call_verdicts(dumps_service, whole, arguments) == [True, False, False]


def _maskbench_cases(limit: int) -> list[tuple[str, dict, list]]:
    out = []
    for path in sorted(Path(DATA / "jsonschemabench" / "maskbench").glob("*.json"))[::50][:limit]:
        doc = json.loads(path.read_text())
        valid = [t["data"] for t in doc.get("tests", []) if t.get("valid")]
        if valid:
            out.append((path.stem, doc["schema"], valid))
    return out


@pytest.mark.parametrize("name, schema, valid", _maskbench_cases(40), ids=lambda v: v if isinstance(v, str) else "")
def test_every_valid_maskbench_instance_printed_by_json_dumps_is_accepted(name, schema, valid):
    """The dumps language is json.dumps's: what the free style accepts in that spelling, dumps accepts too."""
    free = Settings(lint=False, strict_mode=False, json_style="free")
    dumps = Settings(lint=False, strict_mode=False, json_style="dumps")
    try:
        free_grammar = build_grammar(Constraint.of(Kind.JSON, schema), free).grammar
    except ConstraintError:
        pytest.skip("tagjit refuses this schema (the default does too)")
    dumps_grammar = build_grammar(Constraint.of(Kind.JSON, schema), dumps).grammar
    for data in valid:
        text = json.dumps(data)
        assert (xgr.testing._is_grammar_accept_string(dumps_grammar, text)
                == xgr.testing._is_grammar_accept_string(free_grammar, text)), text


def test_dumps_grammars_are_cached_apart_from_the_free_style():
    assert grammar_salt(Settings(json_style="free")) != grammar_salt(Settings(json_style="dumps"))
    assert grammar_salt(Settings()) == grammar_salt(Settings(json_style="dumps"))


def test_dumps_is_the_default_style():
    assert Settings().style == "dumps" and Settings().dumps_spacing


@pytest.mark.parametrize("bound, style", [(0, "compact"), (1, "dumps"), (4, "free"), (None, "free")])
def test_auto_style_is_dumps_only_at_the_default_bound(bound, style):
    assert Settings(max_whitespace=bound).style == style


@pytest.mark.parametrize("raw", ["1", "3", "none"])
def test_a_whitespace_bound_set_in_the_environment_means_the_free_style(raw):
    assert Settings.from_env({"TAGJIT_MAX_WHITESPACE": raw}).style == "free"
    assert Settings.from_env({"TAGJIT_MAX_WHITESPACE": raw, "TAGJIT_JSON_STYLE": "dumps"}).style == "dumps"


def test_an_engines_whitespace_bound_means_the_free_style_and_compact_wins():
    assert Settings().for_engine(max_whitespace=1).style == "free"
    assert Settings(json_style="dumps").for_engine(max_whitespace=3).style == "dumps"
    assert Settings().for_engine(compact_json=True, max_whitespace=3).style == "compact"
