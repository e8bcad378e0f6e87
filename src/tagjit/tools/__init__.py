"""Tool calls as structural tags in each model family's native syntax.

A format (``configs/formats/<name>.json``, read by ``formats``) is data: the call's opening and closing
strings, the argument style, separators, trigger and reasoning markers, and the engine tool parsers it
serves. ``tag`` turns a request's tools, tool_choice and parallel_tool_calls into one structural tag in
that format; ``xml_args`` writes XML-style arguments the engines' parsers read back exactly.
"""

from tagjit.tools.formats import (CallSyntax, ToolFormat, format_for_parser, format_names, load_format,
                                  parse_format, variant_for_vocab)
from tagjit.tools.tag import (Tool, applies, arguments_content, build_tool_tag, build_tool_tag_json, call_tags,
                              constrains_arguments, normalize_tools, parse_tool_choice)

__all__ = [
    "ToolFormat", "CallSyntax", "Tool", "load_format", "format_names", "parse_format", "format_for_parser",
    "variant_for_vocab", "normalize_tools", "parse_tool_choice", "constrains_arguments", "call_tags", "arguments_content",
    "applies", "build_tool_tag", "build_tool_tag_json",
]
