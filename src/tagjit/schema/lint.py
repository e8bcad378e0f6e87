"""Schema lint: what a schema's author should know about how tagjit reads it.

Property order is generation order, so two rules flag orders that hurt the output. ``decision-before-reasoning``: an object lists a decision-like field (an enum, boolean or
number, or a label such as ``category`` or ``verdict``) before its reasoning-like field, so the
model commits to the decision before it has written any reasoning. ``sorted-properties``: an
object's (three or more) properties are in alphabetical order, the mark of ``sort_keys=True`` or a
schema normaliser upstream that threw the author's order away. ``unknown-format``: a ``format`` that is
neither a JSON Schema nor an OpenAPI format is an annotation, not enforced (``tagjit.schema.formats``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator

from tagjit.schema.formats import is_annotation
from tagjit.schema.keywords import children, escape, resolve

DECISION_BEFORE_REASONING = "decision-before-reasoning"
SORTED_PROPERTIES = "sorted-properties"
UNKNOWN_FORMAT = "unknown-format"

REASONING_WORDS = frozenset({
    "reasoning", "reason", "reasons", "analysis", "explanation", "explanations", "rationale", "evidence",
    "thoughts", "thought", "thinking", "justification", "chain_of_thought", "cot", "scratchpad", "deliberation",
    "critique", "reflection", "observations", "assessment", "think",
})
# Words that may surround a reasoning word in a field name ("step_by_step_reasoning", "brief_rationale").
_FILLER = frozenset({"step", "steps", "by", "of", "the", "your", "my", "short", "brief", "detailed", "internal",
                     "chain", "model", "free", "text", "initial", "key", "supporting", "first"})
DECISION_WORDS = frozenset({
    "label", "labels", "answer", "decision", "verdict", "category", "categories", "score", "classification",
    "class", "rating", "result", "choice", "prediction", "outcome", "sentiment", "grade", "judgment",
    "judgement", "conclusion", "final", "winner", "selected", "selection", "intent", "priority", "severity",
    "confidence", "is_correct", "correct", "approved", "valid",
})
_MIN_SORTED = 3


@dataclass(frozen=True)
class Finding:
    """One lint finding: which rule, where (a JSON pointer to the object schema), and why."""

    rule: str
    path: str
    message: str


def lint_schema(schema: Any) -> list[Finding]:
    """All findings for a JSON schema (an empty list when it looks fine)."""
    findings: list[Finding] = []
    if not isinstance(schema, dict):
        return findings
    for path, node in _objects(schema, "#", set()):
        props = node["properties"]
        names = [n for n in props if isinstance(n, str)]
        findings.extend(_decision_first(schema, path, props, names))
        if len(names) >= _MIN_SORTED and all(a < b for a, b in zip(names, names[1:])):
            findings.append(Finding(SORTED_PROPERTIES, path, (
                f"properties are in alphabetical order ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''}): "
                "was the schema re-serialised with sort_keys=True? Property order is generation order")))
    for path, node in _nodes(schema, "#", set()):
        if is_annotation(node.get("format")):
            findings.append(Finding(UNKNOWN_FORMAT, path, (
                f"format {node['format']!r} is not a JSON Schema or OpenAPI format: an annotation, not enforced")))
    return findings


def _nodes(node: Any, path: str, seen: set[int]) -> Iterator[tuple[str, dict]]:
    if not isinstance(node, dict) or id(node) in seen:
        return
    seen.add(id(node))
    yield path, node
    for parts, child in children(node):
        yield from _nodes(child, path + "".join(f"/{escape(str(p))}" for p in parts), seen)


def _decision_first(root: dict, path: str, props: dict, names: list[str]) -> list[Finding]:
    reasoning = [n for n in names if _is_reasoning(n, _resolve(root, props[n]))]
    if not reasoning:
        return []
    first = names.index(reasoning[0])
    early = [n for n in names[:first] if _is_decision(n, _resolve(root, props[n]))]
    if not early:
        return []
    quoted = ", ".join(f"'{n}'" for n in early)
    return [Finding(DECISION_BEFORE_REASONING, path, (
        f"decision field{'s' if len(early) > 1 else ''} {quoted} come{'' if len(early) > 1 else 's'} before "
        f"reasoning field '{reasoning[0]}': the model commits before it reasons; list '{reasoning[0]}' first"))]


def _words(name: str) -> list[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]


def _is_reasoning(name: str, schema: Any) -> bool:
    words = _words(name)
    if "_".join(words) not in REASONING_WORDS and not (
            any(w in REASONING_WORDS for w in words) and all(w in REASONING_WORDS or w in _FILLER for w in words)):
        return False
    if not isinstance(schema, dict):
        return True
    t = schema.get("type")
    free_text = t in (None, "string", "array", "object") and "format" not in schema
    return free_text and not _decision_type(schema)


def _is_decision(name: str, schema: Any) -> bool:
    if isinstance(schema, dict) and _decision_type(schema):
        return True
    words = _words(name)
    return "_".join(words) in DECISION_WORDS or (len(words) <= 2 and bool(words) and words[-1] in DECISION_WORDS)


def _decision_type(schema: dict) -> bool:
    if "enum" in schema or "const" in schema:
        return True
    t = schema.get("type")
    types = {t} if isinstance(t, str) else set(t) if isinstance(t, list) else set()
    types.discard("null")
    return bool(types) and types <= {"boolean", "number", "integer"}


def _resolve(root: dict, node: Any, depth: int = 0) -> Any:
    while isinstance(node, dict) and isinstance(node.get("$ref"), str) and depth < 16:
        try:
            node, depth = resolve(root, node["$ref"]), depth + 1
        except LookupError:
            return node
    return node


def _objects(node: Any, path: str, seen: set[int]) -> Iterator[tuple[str, dict]]:
    if not isinstance(node, dict) or id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node.get("properties"), dict):
        yield path, node
    for parts, child in children(node):
        yield from _objects(child, path + "".join(f"/{escape(str(p))}" for p in parts), seen)
