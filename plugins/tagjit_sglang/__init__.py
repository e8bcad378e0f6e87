"""SGLang adapter: ``--grammar-backend tagjit`` through SGLang's plugin entry point.

SGLang calls ``register()`` (entry point group ``sglang.srt.plugins``) from ``load_plugins()`` in
the CLI process before argument parsing and first thing in every scheduler subprocess. It adds
``tagjit`` to the ``--grammar-backend`` choices and to SGLang's grammar-backend registry, and
registers the hooks (``tools.py``) through which tool calls take tagjit's tags from its format
registry when tagjit is the backend; ``load_plugins()`` applies those hooks after every plugin has
run. All of it is idempotent, so a second call changes nothing.
"""

from __future__ import annotations

from typing import Any

NAME = "tagjit"


def register() -> None:
    """Add tagjit to SGLang's ``--grammar-backend`` choices and its grammar-backend registry."""
    from tagjit.engine import get_settings

    get_settings()  # a bad TAGJIT_* value stops the server here, naming the variable
    from sglang.srt.constrained.base_grammar_backend import register_grammar_backend
    from sglang.srt.server_args import GRAMMAR_BACKEND_CHOICES, add_grammar_backend_choices

    if NAME not in GRAMMAR_BACKEND_CHOICES:  # add_grammar_backend_choices is list.extend
        add_grammar_backend_choices([NAME])
    register_grammar_backend(NAME, create_backend)
    from . import tools

    tools.install()


def create_backend(server_args: Any, tokenizer: Any, vocab_size: int, eos_token_ids: Any = None) -> Any:
    """SGLang's backend factory: ``init_func(server_args, tokenizer, vocab_size, eos_token_ids)``."""
    from .backend import TagjitGrammarBackend  # heavy imports only in the scheduler process

    return TagjitGrammarBackend.from_server_args(server_args, tokenizer, vocab_size, eos_token_ids)


__all__ = ["NAME", "register", "create_backend"]
