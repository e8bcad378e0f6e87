"""What SGLang's API-server process does with a chat request that has tools, run in a spawned process.

The process starts like ``python -m sglang.launch_server`` (``scheduler_side.init``: SGLang's
``load_plugins()``, which runs tagjit's ``register()`` and applies the hooks it registered), then
each scenario publishes real ``ServerArgs`` (grammar backend, ``--tool-call-parser``) and builds
SGLang's own ``OpenAIServingChat`` with SGLang's own ``TemplateManager``. The tokenizer manager
handed to it is the plumbing only: the real Qwen2 tokenizer, ``config_value`` read from the
published runtime context exactly as ``TokenizerManager.config_value`` does, a model config with a
real ``transformers.Qwen2Config`` and no generation defaults, and request logging off. No model is
loaded and nothing is generated; scenarios call the serving layer's request conversion, its
``handle_request`` (for the HTTP error path) and its tool-call response parsing.
"""

from __future__ import annotations

import asyncio
import json
import os
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Iterator

import scheduler_side as S


class TokenizerManagerPlumbing:
    """The attributes OpenAIServingChat reads from SGLang's TokenizerManager, nothing more."""

    def __init__(self, server_args: Any) -> None:
        from transformers import Qwen2Config

        self.server_args = server_args
        self.tokenizer = S.tokenizer()
        self.model_path = server_args.model_path
        self.served_model_name = "qwen2"
        self.model_config = SimpleNamespace(
            is_multimodal=False, hf_config=Qwen2Config(architectures=["Qwen2ForCausalLM"]),
            get_default_sampling_params=lambda: {})
        self.request_logger = SimpleNamespace(log_requests=False, log_requests_level=0)

    def config_value(self, name: str) -> Any:
        """As TokenizerManager.config_value: manager-owned fields, else the published runtime context."""
        from sglang.srt.runtime_context import get_context

        if name in ("model_path", "served_model_name"):
            return getattr(self, name)
        return get_context().config_leaf(name)


def serving(tool_call_parser: str, grammar_backend: str = "tagjit", **server: Any):
    """SGLang's chat handler for freshly published ServerArgs."""
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
    from sglang.srt.parser.template_manager import TemplateManager
    from sglang.srt.runtime_context import get_context
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(model_path=str(S.QWEN2), grammar_backend=grammar_backend, device="cpu",
                      tool_call_parser=tool_call_parser, **server)
    get_context().set_server_args(args)
    return OpenAIServingChat(TokenizerManagerPlumbing(args), TemplateManager())


def chat_request(tools: list[dict], tool_choice: Any = "auto", **fields: Any):
    """A /v1/chat/completions body as SGLang parses it."""
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

    return ChatCompletionRequest(model="qwen2", messages=[{"role": "user", "content": "Please help."}],
                                 tools=tools, tool_choice=tool_choice, **fields)


@contextmanager
def server_env(env: dict[str, str] | None) -> Iterator[None]:
    """tagjit's settings as in a server started with these TAGJIT_* variables, for the block."""
    from tagjit.settings import Settings, get_settings, set_settings

    previous = get_settings()
    if env:
        set_settings(Settings.from_env({**os.environ, **env}))
    try:
        yield
    finally:
        set_settings(previous)


def sampling_constraint(tool_call_parser: str, tools: list[dict], tool_choice: Any = "auto",
                        grammar_backend: str = "tagjit", env: dict[str, str] | None = None,
                        server: dict[str, Any] | None = None, **fields: Any) -> dict:
    """The constraint fields of the sampling params SGLang builds for the request (JSON decoded); ``env``: the
    TAGJIT_* variables of a server started with them (tagjit reads its settings once per process)."""
    with server_env(env):
        handler = serving(tool_call_parser, grammar_backend, **(server or {}))
        adapted, _ = handler._convert_to_internal_request(chat_request(tools, tool_choice, **fields))
    params = adapted.sampling_params
    return {k: json.loads(params[k]) if k in ("structural_tag", "json_schema") else params[k]
            for k in ("structural_tag", "json_schema", "ebnf", "regex") if params.get(k) is not None}


def http_error(tool_call_parser: str, tools: list[dict], tool_choice: Any = "auto",
               env: dict[str, str] | None = None) -> dict:
    """What SGLang's handle_request answers for a request whose conversion fails: status and message."""
    with server_env(env):
        handler = serving(tool_call_parser)
        response = asyncio.run(handler.handle_request(chat_request(tools, tool_choice), None))
    body = json.loads(response.body)
    return {"status": response.status_code, "message": body.get("message"), "type": body.get("type")}


def generate_and_parse(tool_call_parser: str, tools: list[dict], tool_choice: Any, output: str, **fields: Any) -> dict:
    """The request's structural tag, compiled by tagjit through SGLang's GrammarManager, takes ``output``
    token by token (then EOS); SGLang's response path then reads the tool calls from that output (``parses``:
    whether that path runs the tool parser at all, as it does not for a JSON response format)."""
    handler = serving(tool_call_parser)
    request = chat_request(tools, tool_choice, **fields)
    adapted, request = handler._convert_to_internal_request(request)
    tag = adapted.sampling_params["structural_tag"]
    req = S.request("tools", prompt_tokens=64, structural_tag=tag)
    grammar = S.ready(S.manager(), req)  # publishes its own ServerArgs: the handler is done by now
    if grammar is None:
        return {"grammar": None, "abort": req.to_finish.to_json()["message"]}
    error = S.accept_all(grammar, S.encode(output) + [S.EOS])
    parsed = handler._process_tool_calls(output, handler._effective_tools(request), {"type": "stop"},
                                         request.tool_choice)
    calls = [{"name": c.function.name, "arguments": json.loads(c.function.arguments)}
             for c in parsed.tool_calls or []]
    return {"grammar": type(grammar).__name__, "error": error, "terminated": grammar.is_terminated(),
            "calls": calls, "finish": parsed.finish_reason["type"], "content": parsed.remaining_text,
            "parses": not request._response_parser_json_response_format}


def stream_and_parse(tool_call_parser: str, tools: list[dict], tool_choice: Any, output: str, **fields: Any) -> dict:
    """``output`` streamed a token at a time through SGLang's ``_process_tool_call_stream`` (the last delta with
    ``flush``, as at the end of a stream): the content deltas and the tool calls its chunks carry."""
    handler = serving(tool_call_parser)
    _, request = handler._convert_to_internal_request(chat_request(tools, tool_choice, stream=True, **fields))
    tokens = S.encode(output)
    deltas = [S.tokenizer().decode(tokens[:i + 1])[len(S.tokenizer().decode(tokens[:i])):] for i in range(len(tokens))]

    async def run() -> list[str]:
        parsers: dict = {}
        out = []
        for i, delta in enumerate(deltas):
            async for chunk in handler._process_tool_call_stream(0, delta, parsers, {"meta_info": {"id": "x"}},
                                                                 request, {}, 0, flush=i == len(deltas) - 1):
                out.append(chunk)
        return out

    content, calls = [], {}
    for chunk in asyncio.run(run()):
        delta = json.loads(chunk.removeprefix("data: "))["choices"][0]["delta"]
        if delta.get("content"):
            content.append(delta["content"])
        for c in delta.get("tool_calls") or []:
            call = calls.setdefault(c["index"], {"name": "", "arguments": ""})
            call["name"] += c["function"].get("name") or ""
            call["arguments"] += c["function"].get("arguments") or ""
    return {"content": content, "calls": [{"name": c["name"], "arguments": json.loads(c["arguments"])}
                                          for _, c in sorted(calls.items())]}


def sglang_own_constraint(tool_call_parser: str, tools: list[dict], tool_choice: Any = "auto",
                          parallel_tool_calls: bool = True) -> list | None:
    """SGLang's own FunctionCallParser constraint for these tools, outside any serving request."""
    from sglang.srt.entrypoints.openai.protocol import Tool, ToolChoice
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    choice = ToolChoice.model_validate(tool_choice) if isinstance(tool_choice, dict) else tool_choice
    parser = FunctionCallParser([Tool.model_validate(t) for t in tools], tool_call_parser)
    c = parser.get_structure_constraint(choice, parallel_tool_calls=parallel_tool_calls)
    if c is None:
        return None
    value = c[1].model_dump(by_alias=True) if hasattr(c[1], "model_dump") else c[1]
    return [c[0], json.loads(json.dumps(value))]


def hooks_applied() -> dict:
    """Which of tagjit's hooks SGLang's HookRegistry holds and applied, counted once each."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    import tagjit_sglang
    from tagjit_sglang import tools

    tagjit_sglang.register()  # a second registration must not add a second hook
    return {target: {"hooks": sum(1 for _, h, _ in HookRegistry._hooks.get(target, ())
                                  if getattr(h, "__module__", "") == tools.__name__),
                     "applied": target in HookRegistry._patched}
            for target in tools.HOOKS}


__all__ = ["serving", "chat_request", "sampling_constraint", "http_error", "generate_and_parse", "stream_and_parse",
           "sglang_own_constraint", "hooks_applied"]
