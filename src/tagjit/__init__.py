"""tagjit: structured-output backend for vLLM and SGLang, built on xgrammar.

The public surface: compile constraints once per tokenizer (``CompileService``), follow one
request through its grammar (``Grammar``), and apply token bitmasks to logits.
"""

from .bitmask import apply_token_bitmask_inplace
from .compiler import CompileService, service_for
from .errors import CompileLimitError, ConstraintError, UnsupportedFeatureError
from .grammar import Compiled, Grammar, allocate_token_bitmask
from .settings import Settings, get_settings, set_settings
from .spec import Constraint, Kind
from .tokenizer import fingerprint, from_huggingface, load_tokenizer_info

__version__ = "0.1.0"

__all__ = [
    "CompileService", "service_for", "Compiled", "Grammar", "Constraint", "Kind", "Settings",
    "get_settings", "set_settings", "ConstraintError", "UnsupportedFeatureError", "CompileLimitError",
    "allocate_token_bitmask", "apply_token_bitmask_inplace", "load_tokenizer_info", "from_huggingface", "fingerprint",
]
