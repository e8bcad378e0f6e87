"""Berkeley Function Calling Leaderboard functions as OpenAI tools with JSON Schema parameters.

BFCL writes parameter types in a pseudo-schema (``dict``, ``float``, ``tuple``, ``any``...). The
conversion is the one the upstream xgrammar benchmark uses: dict->object, float->number,
int->integer, tuple->array, any->no type. Only schema positions are rewritten, so a property
that happens to be called ``type`` keeps its name.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterator

from tagjit.schema import keywords

TYPE_MAP = {"dict": "object", "float": "number", "int": "integer", "tuple": "array"}
JSON_TYPES = {"object", "number", "integer", "array", "string", "boolean", "null"}
PYTHON_FILES = ("BFCL_v4_simple_python.json", "BFCL_v4_multiple.json", "BFCL_v4_parallel.json",
                "BFCL_v4_parallel_multiple.json")


class UnsupportedBFCLType(ValueError):
    """A BFCL type with no JSON Schema equivalent (Java/JavaScript names such as HashMap)."""


def to_json_schema(node: Any) -> Any:
    """Convert one BFCL parameter schema to JSON Schema."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type":
            if value == "any":
                continue
            mapped = TYPE_MAP.get(value, value)
            if mapped not in JSON_TYPES:
                raise UnsupportedBFCLType(f"BFCL type {value!r}")
            out[key] = mapped
        elif key in keywords.MAPS and isinstance(value, dict):
            out[key] = {name: to_json_schema(sub) for name, sub in value.items()}
        elif key in keywords.VALUES and isinstance(value, dict):
            out[key] = to_json_schema(value)
        elif (key in keywords.LISTS or key == "items") and isinstance(value, list):
            out[key] = [to_json_schema(sub) for sub in value]
        else:
            out[key] = value
    return out


def to_tool(function: dict[str, Any], strict: bool | None = None) -> dict[str, Any]:
    """An OpenAI Chat Completions tool for a BFCL function (dots in names kept)."""
    fn: dict[str, Any] = {"name": function["name"]}
    if function.get("description"):
        fn["description"] = function["description"]
    fn["parameters"] = to_json_schema(function.get("parameters", {"type": "dict", "properties": {}}))
    if strict is not None:
        fn["strict"] = strict
    return {"type": "function", "function": fn}


def iter_functions(data_dir: str, files: tuple[str, ...] = PYTHON_FILES) -> Iterator[dict[str, Any]]:
    """Every BFCL function in the given files, in file order."""
    for name in files:
        with open(os.path.join(data_dir, name), encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield from json.loads(line)["function"]


def load_tools(data_dir: str, count: int | None = None, files: tuple[str, ...] = PYTHON_FILES,
               strict: bool | None = None) -> list[dict[str, Any]]:
    """Up to ``count`` distinct BFCL functions as tools (first occurrence of each name, file order)."""
    tools: list[dict[str, Any]] = []
    seen: set[str] = set()
    for function in iter_functions(data_dir, files):
        if function["name"] in seen:
            continue
        try:
            tool = to_tool(function, strict)
        except UnsupportedBFCLType:
            continue
        seen.add(function["name"])
        tools.append(tool)
        if count is not None and len(tools) >= count:
            break
    return tools
