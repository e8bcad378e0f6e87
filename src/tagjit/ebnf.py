"""The vocabulary-free building blocks every grammar builder shares: the built result and EBNF literals."""

from __future__ import annotations

from typing import Any, NamedTuple

import xgrammar as xgr

# xgrammar 0.2.8 added max_whitespace_cnt to structural-tag JSON content; 0.2.7 (SGLang's pin) lacks it.
TAG_WHITESPACE_BOUND: bool = "max_whitespace_cnt" in getattr(
    getattr(getattr(xgr, "structural_tag", None), "JSONSchemaFormat", None), "model_fields", {})


class Built(NamedTuple):
    """A constraint's grammar and, where a CFG cannot say everything, a per-request token filter."""

    grammar: xgr.Grammar
    filter_spec: Any = None


def ebnf_string(text: str) -> str:
    """Quote a Python string as an EBNF string literal."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)
