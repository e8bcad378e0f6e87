"""The API server's responses: the relaxations a request was served with, as an ``x-tagjit-relaxed`` header."""

from __future__ import annotations

import functools
import sys
from typing import Any

from .state import replace_attr


class RelaxationHeader:
    """ASGI middleware: collects what tagjit relaxed while a request is handled and names it in the response."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            return await self.app(scope, receive, send)
        from tagjit import engine

        with engine.collecting_relaxations() as box:
            async def send_with_header(message: dict) -> None:
                if message.get("type") == "http.response.start" and box:
                    headers = [*message.get("headers", []),
                               (engine.RELAXED_HEADER.encode(), engine.relaxed_header_value(box).encode("ascii"))]
                    message = {**message, "headers": headers}
                await send(message)

            await self.app(scope, receive, send_with_header)


def patch_response_headers() -> None:
    """Add ``RelaxationHeader`` to the app vLLM's API server builds (in the processes that build one)."""
    if not any(m.startswith("vllm.entrypoints") for m in sys.modules):  # an engine core or worker: no app
        return
    from vllm.entrypoints.serve.middleware import register

    original = register.init_entrypoints_middleware
    if getattr(original, "_tagjit", False):
        return

    @functools.wraps(original)
    def init_entrypoints_middleware(args: Any, app: Any, *rest: Any, **kwargs: Any) -> Any:
        out = original(args, app, *rest, **kwargs)
        app.add_middleware(RelaxationHeader)  # added last: outermost, so it sees every response
        return out

    init_entrypoints_middleware._tagjit = True  # type: ignore[attr-defined]
    replace_attr(register, "init_entrypoints_middleware", init_entrypoints_middleware)
    launcher = sys.modules.get("vllm.entrypoints.launchers.app")  # it imported the name before this patch
    if launcher is not None and getattr(launcher, "init_entrypoints_middleware", None) is original:
        replace_attr(launcher, "init_entrypoints_middleware", init_entrypoints_middleware)
