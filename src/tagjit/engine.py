"""The contract between tagjit and an engine adapter, on one page: everything an adapter may use, and its duties.

An adapter (``plugins/tagjit_vllm``, ``plugins/tagjit_sglang``) imports tagjit only through this module
(``tests/test_layout.py`` checks it), so the core can change shape behind it. The flow, for any engine:

Engine level (once per process / tokenizer)
    ``Settings``, ``get_settings``, ``set_settings``
        Read every ``TAGJIT_*`` variable once; a bad value or an unknown ``TAGJIT_*`` name raises ``ValueError``
        naming it (a server started with tagjit variables means tagjit: stopping beats ignoring). An adapter
        folds the engine's own JSON options in with ``Settings.for_engine`` (``disable_any_whitespace`` ->
        compact JSON) and passes those settings to every call that builds a grammar.
    ``from_huggingface``, ``load_tokenizer_info``
        The engine's tokenizer as an ``xgr.TokenizerInfo``.
    ``start_service(tokenizer_info, settings) -> CompileService``
        The compile service of a tokenizer and settings (validation, caches, the compile pool, JIT compiles),
        with its once-per-process work done (per-tokenizer tables, first compiles and fills: ``prepared`` holds
        the milliseconds of each step) and warmed up from ``TAGJIT_WARMUP_FILE``. ``service_for`` is the same
        service without either. Call it while the engine starts, before it reports ready.
    ``prepare_validation(settings, fmt)``
        The once-per-process work of ``validate`` and of building a tool tag in ``fmt`` (default
        ``PREPARE_FORMAT``), for a process that checks requests without a compile service (vLLM's API server);
        milliseconds per step. Call it there before the server takes requests.
    ``JitPolicy``
        Decides per request whether its grammar compiles during prefill (``overlap``; the adapter reports how
        busy the engine is) and learns prefill speed from each request's first mask (``observe_first_mask``).

Request level
    ``Constraint.of(Kind, source)``
        The engine's request (json schema, regex, choice, grammar, structural tag) as one canonical constraint.
    ``validate(constraint, settings)`` / ``trust(constraint, settings)``
        Raise ``ConstraintError`` (an HTTP 400 with the reason) before the request is scheduled; the same path,
        cache, lint and metrics for every engine. ``trust`` records a constraint tagjit built itself (tool tags).
        ``UnsupportedFeatureError`` (a schema feature tagjit refuses by name) and ``CompileLimitError`` (a size or
        time limit) are ``ConstraintError`` subclasses, for engines that report them apart.
    ``parse_schema``, ``with_any_order``
        A request's schema text as JSON (a ``ConstraintError`` if it is not), and the schema with every object's
        properties in any order (a per-request option such as vLLM's ``tagjit_any_order``).
    ``CompileService.grammar`` / ``jit_grammar`` / ``submit`` / ``cached``
        A ``Matcher`` now, a ``Matcher`` whose first mask waits for its compile, or a ``Future[Compiled]``.
    ``Matcher``
        Per-request state: ``accept_token(s)``, ``validate_tokens``, ``rollback``, ``fill_bitmask``,
        ``is_terminated``, ``reset``, ``copy``. Not thread-safe: one engine thread drives a matcher.
    ``fill_bitmasks(matchers, bitmask, rows)``
        A step's masks in one call (xgrammar's batch matcher for plain grammars): what an adapter calls per step.
    ``allocate_token_bitmask``, ``apply_token_bitmask_inplace``, ``apply_token_bitmask_rows_inplace``
        xgrammar's packed int32 bitmask layout, applied to logits by tagjit's kernels. ``prepare_kernels(device,
        vocab_size)`` compiles them where the logits live, in the process that applies masks, before it is ready.

Tool calls
    ``format_for_parser``, ``variant_for_vocab``, ``load_format``, ``build_tool_tag``, ``build_tool_tag_json``
        The structural tag of a request's tools in the format of the engine's tool parser (``None``: tagjit
        does not constrain that request; the engine's own behaviour applies).

Relaxations
    ``collecting_relaxations()``, ``RELAXED_HEADER``, ``relaxed_header_value(items)``
        Wrap one request's handling in ``collecting_relaxations()``: the list it yields holds each relaxation a
        tool or an opted-in schema of that request took; a non-empty list is named to the user in the
        ``RELAXED_HEADER`` response header (``relaxed_header_value``). The log and ``/metrics`` need no adapter.

Metrics
    ``metrics`` (Prometheus), ``SnapshotWriter`` (an engine process's snapshots), ``MergedCollector`` (an API
    server's view of them).

Duties of an adapter
    * Turn on only when the engine selected tagjit, and change nothing of a server that did not (its only trace:
      a bad ``TAGJIT_*`` variable still stops the start, see ``get_settings``).
    * Report a ``ConstraintError`` as a per-request error; never let it stop the engine.
    * Keep the engine's own semantics it did not replace (stop tokens, reasoning, speculative rollback).
"""

from __future__ import annotations

from tagjit import metrics
from tagjit.report import HEADER as RELAXED_HEADER, collecting as collecting_relaxations, header_value as relaxed_header_value
from tagjit.metrics import MergedCollector, SnapshotWriter
from tagjit.anyorder import with_any_order
from tagjit.compile.jit import JitPolicy
from tagjit.compile.service import CompileService, service_for, start_service, trust, validate
from tagjit.compile.warmup import PREPARE_FORMAT, prepare_validation
from tagjit.constraint import Constraint, Kind
from tagjit.errors import CompileLimitError, ConstraintError, UnsupportedFeatureError
from tagjit.kernels import apply_token_bitmask_inplace, apply_token_bitmask_rows_inplace, prepare_kernels
from tagjit.runtime.matcher import Compiled, Matcher, allocate_token_bitmask, fill_bitmasks
from tagjit.runtime.vocab import from_huggingface, load_tokenizer_info
from tagjit.schema import parse_schema
from tagjit.settings import Settings, get_settings, set_settings
from tagjit.tools import build_tool_tag, build_tool_tag_json, format_for_parser, load_format, variant_for_vocab

__all__ = [
    "Settings", "get_settings", "set_settings", "from_huggingface", "load_tokenizer_info", "service_for",
    "start_service", "prepare_validation", "PREPARE_FORMAT", "CompileService", "JitPolicy", "Constraint", "Kind", "validate", "trust", "Compiled", "Matcher", "fill_bitmasks",
    "allocate_token_bitmask", "apply_token_bitmask_inplace", "apply_token_bitmask_rows_inplace", "prepare_kernels",
    "ConstraintError", "UnsupportedFeatureError", "CompileLimitError", "format_for_parser", "variant_for_vocab",
    "load_format", "build_tool_tag", "build_tool_tag_json", "with_any_order", "parse_schema", "metrics", "SnapshotWriter", "MergedCollector",
    "collecting_relaxations", "RELAXED_HEADER", "relaxed_header_value",
]
