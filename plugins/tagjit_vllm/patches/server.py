"""The API server's start and responses: request checks prepared before it serves, relaxations named in a header."""

from __future__ import annotations

import functools
import logging
import sys
from typing import Any

from .state import replace_attr, server_settings, when_selected

log = logging.getLogger("tagjit")


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


def prepare_checks(args: Any) -> None:
    """Do the API server's once-per-process check work (``engine.prepare_validation``) before it serves, in the
    format of its tool parser; a failure is logged, and the first requests pay for it."""
    from tagjit import engine

    parser = getattr(args, "tool_call_parser", None)
    fmt = (engine.format_for_parser(parser) if parser else None) or engine.PREPARE_FORMAT
    try:
        steps = engine.prepare_validation(server_settings(), fmt)
    except Exception:
        log.exception("tagjit: the API server's check preparation failed; the first requests pay for it")
        return
    log.info("tagjit: API server checks prepared in %.0f ms (%s)", sum(steps.values()),
             ", ".join(f"{k} {v:.0f} ms" for k, v in steps.items()))


def patch_response_headers() -> None:
    """Add ``RelaxationHeader`` to the app vLLM's API server builds and prepare its request checks (in the processes
    that build one)."""
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
        when_selected(lambda: prepare_checks(args))
        return out

    init_entrypoints_middleware._tagjit = True  # type: ignore[attr-defined]
    replace_attr(register, "init_entrypoints_middleware", init_entrypoints_middleware)
    launcher = sys.modules.get("vllm.entrypoints.launchers.app")  # it imported the name before this patch
    if launcher is not None and getattr(launcher, "init_entrypoints_middleware", None) is original:
        replace_attr(launcher, "init_entrypoints_middleware", init_entrypoints_middleware)
