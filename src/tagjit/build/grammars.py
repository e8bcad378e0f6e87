"""Turning a constraint into an xgrammar Grammar: the vocabulary-independent half of compiling."""

from __future__ import annotations

import json
import re
from typing import Any

import xgrammar as xgr

from tagjit import schema as schema_mod
from tagjit import anyorder as any_order
from tagjit.build.ebnf import TAG_WHITESPACE_BOUND, Built, ebnf_string, whitespace_options
from tagjit.build.splice import lift
from tagjit.errors import CompileLimitError, ConstraintError, UnsupportedFeatureError
from tagjit.schema.relax import NAMES, Relaxation, allowed_by, family, relax
from tagjit.settings import Settings, relax_names
from tagjit.constraint import Constraint, Kind, compact_json
from tagjit.build.printed import fix_string_lengths, repair_json

def build_grammar(constraint: Constraint, settings: Settings) -> Built:
    """Build the xgrammar Grammar for a constraint, raising ConstraintError with the reason."""
    return build_with_relaxations(constraint, settings)[0]


def build_with_relaxations(constraint: Constraint, settings: Settings) -> tuple[Built, tuple[Relaxation, ...]]:
    """``build_grammar``, and the relaxations a JSON schema took where the server or the request allowed them."""
    try:
        if constraint.kind is Kind.JSON:
            return _json(constraint, settings)
        built = _BUILDERS[constraint.kind](constraint, settings)
        return (built if isinstance(built, Built) else Built(built)), ()
    except ConstraintError:
        raise
    except RecursionError:
        raise ConstraintError(f"{constraint.kind.value}: nested too deeply") from None
    except Exception as e:  # xgrammar raises RuntimeError/ValueError subclasses with the reason
        raise ConstraintError(f"invalid {constraint.kind.value}: {_first_line(e)}") from None


def json_schema_grammar(schema: dict | bool, settings: Settings, filter_counts: bool = True) -> Built:
    """Grammar (and token filter) for a checked JSON schema with tagjit's whitespace bound (``filter_counts``: string
    lengths the grammar cannot count exactly are counted by a token filter; else they are the grammar's, or refused,
    for a grammar that goes where no filter follows it, as inside a structural tag)."""
    if not filter_counts:
        return _prepared_built(schema_mod.prepare_schema(schema, settings.strict_mode), settings)
    # Where the filter cannot tell which string a text is at a counted one (below a union of objects in declared
    # order), those strings' lengths stay the grammar's: exact where it can write them, named where it cannot.
    uncounted: frozenset[str] = frozenset()
    for _ in range(_COUNT_TRIES):
        try:
            return _prepared_built(schema_mod.prepare_schema(schema, settings.strict_mode, uncounted), settings)
        except any_order.CountUnfollowable as e:
            if e.paths <= uncounted:
                break
            uncounted |= e.paths
    return _prepared_built(schema_mod.prepare_schema(schema, settings.strict_mode), settings)


# Unions of objects a schema may hold whose strings the filter cannot count, each a retry (then none is counted).
_COUNT_TRIES = 8


def _prepared_built(schema: dict | bool, settings: Settings) -> Built:
    lifted, own = lift(schema)
    if any_order.wants_any_order(schema, settings.any_order_default):
        built = any_order.build(lifted, settings, own)
        return Built(fix_string_lengths(own.splice(built.grammar)), built.filter_spec)
    spec = any_order.count_filter(lifted, settings, own) if own.counts else None
    return Built(_lifted_grammar(lifted, own, settings), spec)


def prepared_json_grammar(schema: dict | bool, settings: Settings) -> xgr.Grammar:
    """xgrammar's grammar of a prepared schema, with tagjit's own rules spliced in where xgrammar is not exact."""
    lifted, own = lift(schema)
    return _lifted_grammar(lifted, own, settings)


def _lifted_grammar(lifted: Any, own: Any, settings: Settings) -> xgr.Grammar:
    return repair_json(own.splice(xgr.Grammar.from_json_schema(
        json.dumps(lifted), strict_mode=settings.strict_mode, **whitespace_options(settings))),
        bounded_whitespace=settings.bounded_whitespace)


# A schema's own opt-in to relaxations: a list of names (see ``schema.relax.NAMES``), "all" or true.
RELAX_KEYWORD = "x-tagjit-relax"


def _json(c: Constraint, s: Settings) -> tuple[Built, tuple[Relaxation, ...]]:
    built, _, steps = _relaxed(schema_mod.parse_schema(c.source), s)
    return built, steps


def enforced_schema(schema: dict | bool, settings: Settings) -> tuple[dict | bool, tuple[Relaxation, ...]]:
    """A non-tool schema as tagjit enforces it: itself, or the relaxation the server or the schema opted into
    (UnsupportedFeatureError naming the feature and the opt-in otherwise)."""
    _, loose, steps = _relaxed(schema, settings, filter_counts=False)  # it goes into a structural tag
    return loose, steps


def _relaxed(schema: dict | bool, s: Settings, filter_counts: bool = True,
             ) -> tuple[Built, Any, tuple[Relaxation, ...]]:
    names = relax_names(s.relax) + _requested_relaxations(schema)
    try:
        if not names:
            return json_schema_grammar(schema, s, filter_counts), schema, ()
        return relax(schema, lambda x: json_schema_grammar(x, s, filter_counts), allowed_by(names))
    except UnsupportedFeatureError as e:
        name = family(e.feature)
        e.args = (f"{e}; it can be enforced loosely as the relaxation {name!r}: TAGJIT_RELAX={name} on the server "
                  f"or \"{RELAX_KEYWORD}\": [\"{name}\"] in the schema",)
        raise


def _requested_relaxations(schema: Any) -> list[str]:
    if not isinstance(schema, dict) or RELAX_KEYWORD not in schema:
        return []
    value = schema[RELAX_KEYWORD]
    names = (["all"] if value is True else [] if value is False else [value] if isinstance(value, str)
             else value if isinstance(value, list) else None)
    if names is None or any(n not in (*NAMES, "all") for n in names):
        raise ConstraintError(f"{RELAX_KEYWORD} must be true, \"all\" or a list of relaxation names ("
                              + ", ".join(NAMES) + f"), not {json.dumps(value)}")
    return list(names)


def _json_object(c: Constraint, s: Settings) -> xgr.Grammar:
    return repair_json(xgr.Grammar.from_json_schema('{"type": "object"}', strict_mode=False, **whitespace_options(s)),
                       bounded_whitespace=s.bounded_whitespace)


# Longest regex and most choices tagjit compiles (Python's own regex compile of a 100k-alternative
# pattern takes seconds before xgrammar starts).
MAX_REGEX_CHARS = 65536
MAX_CHOICES = 100_000
# Structural-tag formats that name tokens: they need the vocabulary, which building a grammar has not.
_TOKEN_FORMATS = ("token", "any_tokens", "token_triggered_tags")


def _regex(c: Constraint, s: Settings) -> xgr.Grammar:
    if "\x00" in c.source:
        raise ConstraintError("regex must not contain a NUL character")
    if schema_mod.has_lone_surrogate(c.source):
        raise ConstraintError("regex contains a lone UTF-16 surrogate, which is not valid Unicode")
    if len(c.source) > MAX_REGEX_CHARS:
        raise CompileLimitError(f"regex of {len(c.source)} characters is longer than tagjit's limit of "
                                f"{MAX_REGEX_CHARS}")
    try:
        re.compile(c.source)
    except re.error as e:
        raise ConstraintError(f"invalid regex: {e}") from None
    return xgr.Grammar.from_regex(c.source)


def _choice(c: Constraint, s: Settings) -> xgr.Grammar:
    choices = c.parsed()
    if not isinstance(choices, list) or not choices or not all(isinstance(x, str) for x in choices):
        raise ConstraintError("choice must be a non-empty list of strings")
    if len(choices) > MAX_CHOICES:
        raise CompileLimitError(f"choice of {len(choices)} strings is more than tagjit's limit of {MAX_CHOICES}")
    if any(schema_mod.has_lone_surrogate(x) for x in choices):
        raise ConstraintError("choice contains a lone UTF-16 surrogate, which is not valid Unicode")
    return xgr.Grammar.from_ebnf("root ::= " + " | ".join(ebnf_string(x) for x in choices))


def _grammar(c: Constraint, s: Settings) -> xgr.Grammar:
    if "::=" in c.source or not looks_like_lark(c.source):
        return xgr.Grammar.from_ebnf(c.source)
    return xgr.Grammar.from_lark(c.source)


def _structural_tag(c: Constraint, s: Settings) -> xgr.Grammar:
    tag = c.parsed()
    if not isinstance(tag, dict):
        raise ConstraintError("structural_tag must be a JSON object")
    if "structures" in tag:
        tag = legacy_to_format(tag)
    if "format" not in tag:
        raise ConstraintError("structural_tag needs a 'format' (or legacy 'structures' and 'triggers')")
    tag = {"type": "structural_tag", "format": _prepare_format(tag["format"], s)}
    # Bounded whitespace in JSON content follows tagjit's rule (none before ',' and ':') in every tag, so a tool's
    # per-tool unit and the whole tag it switches to tighten alike; unbounded content has no slots to edit.
    return repair_json(xgr.Grammar.from_structural_tag(json.dumps(tag)), bounded_whitespace=True)


def legacy_to_format(tag: dict) -> dict:
    """Convert the legacy ``structures``/``triggers`` form to the ``format`` form."""
    structures, triggers = tag.get("structures"), tag.get("triggers")
    if not isinstance(structures, list) or not isinstance(triggers, list):
        raise ConstraintError("legacy structural_tag needs lists 'structures' and 'triggers'")
    tags = []
    for i, st in enumerate(structures):
        if not isinstance(st, dict) or not {"begin", "end"} <= st.keys():
            raise ConstraintError(f"structural_tag structures[{i}] needs 'begin', 'schema' and 'end'")
        schema = st.get("schema")
        if schema is None:  # SGLang sends None for a tool without parameters: any JSON object
            schema = {"type": "object"}
        if isinstance(schema, str):
            schema = schema_mod.parse_schema(schema)
        tags.append({"type": "tag", "begin": st["begin"],
                     "content": {"type": "json_schema", "json_schema": schema}, "end": st["end"]})
    fmt: dict = {"type": "triggered_tags", "triggers": triggers, "tags": tags}
    for flag in ("at_least_one", "stop_after_first"):  # SGLang's tool_choice=required sets at_least_one
        if tag.get(flag) is not None:
            fmt[flag] = bool(tag[flag])
    return {"type": "structural_tag", "format": fmt}


def _prepare_format(node: Any, s: Settings) -> Any:
    """Check every JSON schema inside a structural tag and bound its whitespace."""
    if isinstance(node, list):
        return [_prepare_format(x, s) for x in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") in _TOKEN_FORMATS:
        raise ConstraintError(f"structural_tag format {node['type']!r} names vocabulary tokens, which "
                              "tagjit does not resolve yet: use a string-level format (tag, const_string)")
    out = {k: _prepare_format(v, s) if k != "json_schema" else v for k, v in node.items()}
    if node.get("type") == "json_schema":
        if "json_schema" not in node:
            raise ConstraintError("structural_tag json_schema format needs a 'json_schema'")
        out["json_schema"] = schema_mod.prepared(compact_json(node["json_schema"]), s.strict_mode)
        if "max_whitespace_cnt" not in node and s.dumps_spacing and not styled_content(node):
            return {"type": "grammar", "grammar": str(prepared_json_grammar(out["json_schema"], s))}
        bound = node.get("max_whitespace_cnt", s.max_whitespace if TAG_WHITESPACE_BOUND else None)
        # Another style keeps xgrammar's numbers and bounded strings (tagjit's are JSON text); the rest is refused.
        styled = styled_content(node)
        own = bool(lift(out["json_schema"], json_style=not styled)[1].rules)
        if own and styled:
            raise UnsupportedFeatureError(f"multipleOf, not: {{enum}} or pattern with minLength/maxLength in a "
                                          f"structural tag's {node.get('style')!r} content")
        if bound == 0:
            return _compact_json_content(out, s)
        if own:
            free = s.replace(max_whitespace=bound, json_style="free")  # a tag's own bound, or the free style's
            return {"type": "grammar", "grammar": str(prepared_json_grammar(out["json_schema"], free))}
        if TAG_WHITESPACE_BOUND and bound is not None:
            out["max_whitespace_cnt"] = bound
    return out


def _compact_json_content(node: dict, s: Settings) -> dict:
    """A tag's JSON content without whitespace: xgrammar's tag format takes only a positive bound, so a JSON-style
    content becomes the compact JSON grammar of its schema; other styles get xgrammar's least bound, 1."""
    if styled_content(node):
        return {**node, "max_whitespace_cnt": 1}
    return {"type": "grammar", "grammar": str(prepared_json_grammar(node["json_schema"], s.replace(max_whitespace=0)))}


_JSON_CONTENT_KEYS = frozenset({"type", "json_schema", "style", "max_whitespace_cnt"})


def styled_content(node: dict) -> bool:
    """A tag's JSON-schema content in another style than plain JSON (xgrammar's XML styles, or unknown keys)."""
    return node.get("style", "json") != "json" or bool(set(node) - _JSON_CONTENT_KEYS)


_BUILDERS = {
    Kind.JSON_OBJECT: _json_object,
    Kind.REGEX: _regex,
    Kind.CHOICE: _choice,
    Kind.GRAMMAR: _grammar,
    Kind.STRUCTURAL_TAG: _structural_tag,
}


def looks_like_lark(text: str) -> bool:
    """Heuristic used by vLLM too: Lark rules are ``name: ...`` and EBNF rules ``name ::= ...``."""
    return bool(re.search(r"^\s*[?!]?[a-z_][a-z0-9_]*\s*:(?!:=)", text, re.M))


def rule_count(grammar: xgr.Grammar) -> int:
    """Number of rules in the grammar's EBNF."""
    return sum(1 for line in str(grammar).splitlines() if "::=" in line)


def _first_line(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:500] if len(text) > 500 else text
