"""Whether every schema a request can reach accepts some value: a ``$ref`` cycle with no base case accepts none.

xgrammar compiles such a schema into rules that derive no finite text; the token masks then lead a model into a
state where no token is allowed, and the request fails inside the engine. Found here, it is a 400 naming the cycle.
Recursive schemas with a base case (a tree whose children are optional, a list that may end) are productive.
"""

from __future__ import annotations

from typing import Any

from tagjit.schema.keywords import children, path_text, pointer_parts, resolve

_DEFINITIONS = ("$defs", "definitions")


def unproductive_refs(root: dict) -> list[str]:
    """The paths of the reachable ``$ref`` nodes that accept no value (empty if there are none)."""
    nodes, paths = _reachable(root)
    if not any("$ref" in n for n in nodes.values()):
        return []
    known: set[int] = set()  # ids of nodes known to accept some value: grown to a fixpoint
    changed = True
    while changed:
        changed = False
        for key, node in nodes.items():
            if key not in known and _productive(node, root, known):
                known.add(key)
                changed = True
    return [paths[k] for k, n in nodes.items() if k not in known and "$ref" in n]


def _reachable(root: dict) -> tuple[dict[int, dict], dict[int, str]]:
    """Every schema node reachable from root through its keywords and local ``$ref``s, with a path of each."""
    nodes: dict[int, dict] = {}
    paths: dict[int, str] = {}
    todo: list[tuple[Any, str]] = [(root, "#")]
    while todo:
        node, path = todo.pop()
        if not isinstance(node, dict) or id(node) in nodes:
            continue
        nodes[id(node)] = node
        paths[id(node)] = path
        for parts, child in children(node):
            if parts[0] not in _DEFINITIONS:
                todo.append((child, path_text((path, *parts))))
        ref = node.get("$ref")
        if isinstance(ref, str) and pointer_parts(ref) is not None:
            try:
                todo.append((resolve(root, ref), ref))
            except LookupError:
                pass
    return nodes, paths


def _holds(node: Any, known: set[int]) -> bool:
    if isinstance(node, bool):
        return node
    return not isinstance(node, dict) or id(node) in known


def _productive(node: dict, root: dict, known: set[int]) -> bool:
    """Whether node accepts some value, given the nodes already known to (one step of the fixpoint)."""
    ref = node.get("$ref")
    if isinstance(ref, str) and pointer_parts(ref) is not None:
        try:
            if not _holds(resolve(root, ref), known):
                return False
        except LookupError:
            pass  # a dangling $ref is refused elsewhere, with its own message
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list) and node[key] and not any(_holds(b, known) for b in node[key]):
            return False
    if isinstance(node.get("allOf"), list) and not all(_holds(b, known) for b in node["allOf"]):
        return False
    types = node.get("type")
    options = types if isinstance(types, list) else [types] if isinstance(types, str) else [None]
    return any(_type_productive(t, node, known) for t in options)


def _type_productive(kind: str | None, node: dict, known: set[int]) -> bool:
    if kind == "object":
        props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
        extra = node.get("additionalProperties", True)
        required = node.get("required") if isinstance(node.get("required"), list) else []
        return all(_holds(props.get(name, extra), known) for name in required if isinstance(name, str))
    if kind == "array":
        least = node.get("minItems", 0)
        if not isinstance(least, int) or least <= 0:
            return True
        prefix = node.get("prefixItems") if isinstance(node.get("prefixItems"), list) else []
        items = node.get("items", True)
        return all(_holds(prefix[i] if i < len(prefix) else items, known) for i in range(min(least, len(prefix) + 1)))
    return True
