"""Whole hermes calls of a real BFCL tool judged by a service's tool-call grammar, per-tool parts or whole tag."""

from __future__ import annotations

import xgrammar as xgr

from shared_data import DATA
from tagjit import CompileService
from tagjit.build.grammars import build_grammar
from tagjit.constraint import Constraint, Kind
from tagjit.tools import bfcl, build_tool_tag, load_format


def hermes_call_verdicts(service: CompileService, whole: bool, arguments: list[str]) -> list[bool]:
    """Whether a hermes call of calculate_triangle_area(base, height, unit) with each arguments text is accepted."""
    tool = bfcl.load_tools(str(DATA / "bfcl"), 1)[0]
    fmt = load_format("hermes")
    c = Constraint.of(Kind.STRUCTURAL_TAG, build_tool_tag(fmt, [tool], "required", False, service.settings))
    head, end = fmt.render_begin(tool["function"]["name"], 0), fmt.call[0].end
    verdicts = []
    for args in arguments:
        if whole:
            m = xgr.GrammarMatcher(service.compiler.compile_grammar(build_grammar(c, service.settings).grammar))
        else:
            m = service.compile(c).new_matcher()
        verdicts.append(m.accept_string(head + args + end) and m.is_completed())
    return verdicts
