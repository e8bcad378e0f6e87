"""The API server app vLLM builds names a request's relaxations in its response: tagjit's middleware is added by
vLLM's own ``init_entrypoints_middleware``, around the handler that builds the tool tag."""
# No `from __future__ import annotations`: FastAPI reads the route's annotations, and Request is imported locally.

from typing import Any

import pytest

pytest.importorskip("vllm")

SLOPPY = {"type": "function", "function": {"name": "tag_photo", "parameters": {
    "type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
    "required": ["tags"]}}}
PLAIN = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def app_with_vllm_middleware() -> Any:
    """A FastAPI app through vLLM's middleware set-up (parsed from vLLM's own CLI defaults), whose one route builds
    the tool tag of the tools it is posted, as the API server's tool parser does."""
    from fastapi import FastAPI, Request
    try:
        from vllm.entrypoints.common.cli_args import make_arg_parser  # 0.33
    except ImportError:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser  # 0.32
    from vllm.entrypoints.serve.middleware import register
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    import tagjit.engine

    app = FastAPI()

    @app.post("/tag")
    async def tag(request: Request) -> dict:
        tagjit.engine.build_tool_tag_json("hermes", (await request.json())["tools"], "required", True)
        return {"ok": True}

    args = make_arg_parser(FlexibleArgumentParser()).parse_args([])
    register.init_entrypoints_middleware(args, app, ("generate",))
    return app


def post(app: Any, path: str, body: dict) -> tuple[int, dict[str, str]]:
    """POST through the app's ASGI interface, as uvicorn calls it: (status, response headers)."""
    import asyncio
    import json

    data = json.dumps(body).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000)}
    start: dict = {}

    async def receive() -> dict:
        return {"type": "http.request", "body": data, "more_body": False}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            start.update(message)

    asyncio.run(app(scope, receive, send))
    return start["status"], {k.decode(): v.decode() for k, v in start.get("headers", [])}


def test_vllm_builds_its_app_with_the_relaxation_header_middleware() -> None:
    from tagjit_vllm.patches import RelaxationHeader

    assert any(m.cls is RelaxationHeader for m in app_with_vllm_middleware().user_middleware)


def test_a_relaxed_tool_is_named_in_the_response_header() -> None:
    status, headers = post(app_with_vllm_middleware(), "/tag", {"tools": [PLAIN, SLOPPY]})
    assert status == 200
    assert headers["x-tagjit-relaxed"] == "tool 'tag_photo': uniqueItems at #/properties/tags"


def test_a_request_enforced_exactly_has_no_relaxation_header() -> None:
    status, headers = post(app_with_vllm_middleware(), "/tag", {"tools": [PLAIN]})
    assert status == 200
    assert "x-tagjit-relaxed" not in headers
