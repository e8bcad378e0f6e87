"""Planning a composite: the vocabulary-independent split of a tool-call tag into literals and units."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


from tagjit.constraint import compact_json


_OUTER_TYPES = {"sequence", "or", "tags_with_separator", "const_string", "tag", "json_schema", "triggered_tags"}
_JSON_CLOSERS = {"object": b"}", "array": b"]", "string": b'"'}
FINAL = (-1, 0)


class Ambiguous(Exception):
    """A token could be split between parts in more than one way: the full grammar decides."""


# -- planning: the vocabulary-independent split ---------------------------------------------------

@dataclass
class Plan:
    """The outer automaton (edges labelled by literals or unit holes) and the unit tags it refers to."""

    edge_src: list[int] = field(default_factory=list)
    edge_lit: list[bytes | None] = field(default_factory=list)  # None: a hole
    edge_dst: list[int] = field(default_factory=list)
    edge_unit: list[int] = field(default_factory=list)  # unit index of a hole, else -1
    edge_bare: list[bool] = field(default_factory=list)  # a hole no begin literal leads to (a bare JSON answer)
    out: list[list[int]] = field(default_factory=list)
    final: int = 0
    units: list[str] = field(default_factory=list)  # unit formats as compact JSON, one per distinct unit
    unit_last: list[bytes | None] = field(default_factory=list)  # bytes a complete unit can end with (None: any)
    unit_nested: list[bool] = field(default_factory=list)  # a bare JSON object/array: completes at depth 0
    # A free-text unit: the trigger that ends it (text up to its first trigger, then done), else None.
    unit_trigger: list[bytes | None] = field(default_factory=list)
    begins: list[bytes] = field(default_factory=list)

    def node(self) -> int:
        self.out.append([])
        return len(self.out) - 1

    def edge(self, src: int, lit: bytes | None, dst: int, unit: int = -1, bare: bool = False) -> None:
        self.edge_src.append(src)
        self.edge_lit.append(lit)
        self.edge_dst.append(dst)
        self.edge_unit.append(unit)
        self.edge_bare.append(bare)
        self.out[src].append(len(self.edge_lit) - 1)


def plan(fmt: Any) -> Plan | None:
    """Split a structural-tag format into outer automaton and units, or None if it does not fit.

    Contents are taken as given (their schemas are checked when a unit compiles), so a unit's key is
    that of the request's own text and a known tool costs no schema work.
    """
    p = Plan()
    unit_index: dict[str, int] = {}
    start = p.node()
    p.final = p.node()
    try:
        _build(fmt, start, p.final, p, unit_index)
    except _NoFit:
        return None
    if not p.units or not _begins_prefix_free(p.begins):
        return None
    return p


class _NoFit(Exception):
    pass


def _lit(value: Any) -> bytes:
    if not isinstance(value, str):
        raise _NoFit
    return value.encode("utf-8")


def _build(node: Any, src: int, dst: int, p: Plan, units: dict[str, int]) -> None:
    if not isinstance(node, dict) or node.get("type") not in _OUTER_TYPES:
        raise _NoFit
    kind = node["type"]
    if kind == "const_string":
        p.edge(src, _lit(node.get("value")), dst)
    elif kind == "sequence":
        elements = node.get("elements")
        if not isinstance(elements, list) or not elements:
            raise _NoFit
        cur = src
        for i, el in enumerate(elements):
            nxt = dst if i == len(elements) - 1 else p.node()
            _build(el, cur, nxt, p, units)
            cur = nxt
    elif kind == "or":
        elements = node.get("elements")
        if not isinstance(elements, list) or not elements:
            raise _NoFit
        for el in elements:
            _build(el, src, dst, p, units)
    elif kind == "tag":
        _build_tag(node, src, dst, p, units)
    elif kind == "json_schema":
        _build_bare(node, src, dst, p, units)
    elif kind == "triggered_tags":
        _build_triggered(node, src, dst, p, units)
    else:
        _build_tws(node, src, dst, p, units)


def _build_tws(node: dict, src: int, dst: int, p: Plan, units: dict[str, int]) -> None:
    tags = node.get("tags")
    if not isinstance(tags, list) or not tags or set(node) - {"type", "tags", "separator", "at_least_one",
                                                               "stop_after_first"}:
        raise _NoFit
    sep = _lit(node.get("separator", ""))
    at_least_one = bool(node.get("at_least_one", False))
    single = bool(node.get("stop_after_first", False))
    parts = []
    for tag in tags:
        if not isinstance(tag, dict) or tag.get("type") != "tag":
            raise _NoFit
        parts.append(_tag_parts(tag, p, units))
    loop = p.node()
    for part in parts:
        _tag_edges(part, src, loop, p)
    p.edge(loop, b"", dst)
    if not single:
        again = p.node()
        p.edge(loop, sep, again)
        for part in parts:
            _tag_edges(part, again, loop, p)
    if not at_least_one:
        p.edge(src, b"", dst)


def _build_tag(node: dict, src: int, dst: int, p: Plan, units: dict[str, int]) -> None:
    _tag_edges(_tag_parts(node, p, units), src, dst, p)


def _build_bare(node: dict, src: int, dst: int, p: Plan, units: dict[str, int]) -> None:
    """A JSON value outside any tag (an agent's final answer): a unit entered by its own first byte, which must
    tell it from every literal that may come at the same point (the matcher checks, else the whole tag compiles)."""
    last = _json_closer(node)
    if last is None or _has_forbidden(node):
        raise _NoFit
    p.edge(src, None, dst, unit=_unit_index(node, p, units, nested=last in (b"}", b"]"), last=last), bare=True)


def _build_triggered(node: dict, src: int, dst: int, p: Plan, units: dict[str, int]) -> None:
    """Free text with calls where the trigger appears (tool_choice=auto), as the whole output.

    The text is a unit of its own: xgrammar's TagDispatch with the same trigger and excludes, dispatching to
    nothing, so it is done exactly where the trigger completes (or the output may end inside it). Each tag's begin
    less the trigger is then a literal, as in a forced tag, and a tag whose content is the calls' own structure (a
    wrapper) is laid out in the outer automaton; after a tag the text unit comes again (or, with stop_after_first,
    the end)."""
    if src != 0 or dst != p.final or set(node) - {"type", "triggers", "tags", "excludes", "at_least_one",
                                                  "stop_after_first"} or node.get("at_least_one"):
        raise _NoFit
    triggers, tags, excludes = node.get("triggers"), node.get("tags"), node.get("excludes", [])
    if (not isinstance(triggers, list) or len(triggers) != 1 or not isinstance(tags, list) or not tags
            or not isinstance(excludes, list)):
        raise _NoFit
    trigger = triggers[0]
    lit = _lit(trigger)
    for tag in tags:
        if not isinstance(tag, dict) or tag.get("type") != "tag" or not isinstance(tag.get("begin"), str) \
                or not tag["begin"].startswith(trigger) or set(tag) - {"type", "begin", "content", "end"}:
            raise _NoFit
    text = {"type": "triggered_tags", "triggers": [trigger], "tags": [
        {"type": "tag", "begin": trigger, "content": {"type": "const_string", "value": ""}, "end": ""}],
        "excludes": [_lit(e).decode("utf-8") for e in excludes], "stop_after_first": True}
    u = _unit_index(text, p, units, nested=False, last=lit[-1:], trigger=lit)
    calls, after = p.node(), p.node()
    p.edge(src, None, calls, unit=u, bare=True)
    p.edge(src, b"", dst)  # no text at all
    for tag in tags:
        rest = tag["begin"][len(trigger):]
        content = tag.get("content")
        if isinstance(content, dict) and content.get("type") in ("tags_with_separator", "sequence", "or") \
                and _has_forbidden(content):
            # A wrapper around the calls (DeepSeek, Kimi, Mistral): its begin less the trigger, the calls as outer
            # structure, its end.
            inner, out = p.node(), p.node()
            p.edge(calls, _lit(rest), inner)
            _build(content, inner, out, p, units)
            end = tag.get("end", "")
            for e in end if isinstance(end, list) else [end]:
                p.edge(out, _lit(e), after)
        elif rest:
            _tag_edges(_tag_parts({**tag, "begin": rest}, p, units), calls, after, p)
        else:
            raise _NoFit  # a unit right where the trigger completes: no literal would enter it
    p.edge(after, b"", dst)
    if not node.get("stop_after_first"):
        p.edge(after, None, calls, unit=u, bare=True)


def _unit_index(unit_tag: dict, p: Plan, units: dict[str, int], nested: bool, last: bytes | None,
                trigger: bytes | None = None) -> int:
    text = compact_json(unit_tag)
    u = units.get(text)
    if u is None:
        u = units[text] = len(p.units)
        p.units.append(text)
        p.unit_nested.append(nested)
        p.unit_last.append(last)
        p.unit_trigger.append(trigger)
    return u


def _tag_parts(node: dict, p: Plan, units: dict[str, int]) -> tuple[bytes, int, list[bytes]]:
    """(begin, unit index, end literals left in the outer automaton) of one tag."""
    if set(node) - {"type", "begin", "content", "end"}:
        raise _NoFit
    begin = _lit(node.get("begin"))
    end = node.get("end", "")
    ends = [_lit(e) for e in end] if isinstance(end, list) else [_lit(end)]
    content = node.get("content")
    if not begin or not ends or not isinstance(content, dict) or _has_forbidden(content):
        raise _NoFit
    last = _json_closer(content)
    if last is not None or len(ends) != 1 or not ends[0]:
        # The unit is the content alone; the end literal(s) stay in the outer automaton.
        unit_tag, tail = content, ends
    else:
        # Content and end compile together, so xgrammar settles where the content stops.
        unit_tag = {"type": "sequence", "elements": [content, {"type": "const_string", "value": end}]}
        tail, last = [b""], ends[0][-1:]
    u = _unit_index(unit_tag, p, units, nested=tail is ends and last in (b"}", b"]"), last=last)
    p.begins.append(begin)
    return begin, u, tail


def _tag_edges(part: tuple[bytes, int, list[bytes]], src: int, dst: int, p: Plan) -> None:
    begin, u, tail = part
    mid, after = p.node(), p.node()
    p.edge(src, begin, mid)
    p.edge(mid, None, after, unit=u)
    for e in tail:
        p.edge(after, e, dst)


def _json_closer(content: dict) -> bytes | None:
    """The last byte of any complete value of a JSON-style content whose top-level type is fixed."""
    if content.get("type") != "json_schema" or content.get("style", "json") != "json":
        return None
    schema = content.get("json_schema")
    if isinstance(schema, dict) and isinstance(schema.get("type"), str):
        return _JSON_CLOSERS.get(schema["type"])
    return None


def _has_forbidden(node: Any) -> bool:
    """Whether a content holds anything but JSON-style schemas, regexes and constants.

    Free text and nested tags belong to the outer language; XML argument styles and raw grammars are
    left to the whole-tag compile because each would carry its own copy of heavy shared rules
    (seconds per tool in xgrammar 0.2.8), where the whole tag shares them.
    """
    if isinstance(node, list):
        return any(_has_forbidden(x) for x in node)
    if not isinstance(node, dict):
        return True
    kind = node.get("type")
    if kind == "json_schema":
        return node.get("style", "json") != "json"
    if kind in ("regex", "const_string"):
        return False
    if kind == "sequence":
        return _has_forbidden(node.get("elements"))
    return True


def _begins_prefix_free(begins: list[bytes]) -> bool:
    distinct = sorted(set(begins))
    return all(not b.startswith(a) for a, b in zip(distinct, distinct[1:]))
