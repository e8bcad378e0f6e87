"""tagjit: structured-output backend for vLLM and SGLang, built on xgrammar.

The public surface: compile constraints once per tokenizer (``CompileService``), follow one
request through its grammar (``Matcher``), and apply token bitmasks to logits.
"""

from tagjit.kernels import apply_token_bitmask_inplace
from tagjit.compile.service import CompileService, service_for
from tagjit.errors import CompileLimitError, ConstraintError, UnsupportedFeatureError
from tagjit.runtime.matcher import Compiled, Matcher, allocate_token_bitmask
from tagjit.settings import Settings, get_settings, set_settings
from tagjit.constraint import Constraint, Kind
from tagjit.runtime.vocab import fingerprint, from_huggingface, load_tokenizer_info

__version__ = "0.1.0"

__all__ = [
    "CompileService", "service_for", "Compiled", "Matcher", "Constraint", "Kind", "Settings",
    "get_settings", "set_settings", "ConstraintError", "UnsupportedFeatureError", "CompileLimitError",
    "allocate_token_bitmask", "apply_token_bitmask_inplace", "load_tokenizer_info", "from_huggingface", "fingerprint",
]
