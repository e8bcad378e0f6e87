"""What a request asks for: the constraint kinds and their order-preserving canonical keys."""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from tagjit.compile.cache import bounded_memo
from tagjit.errors import ConstraintError
from tagjit.settings import get_settings

_JSON_KINDS = ("json", "choice", "structural_tag")
_CHEAP_KEY_CHARS = 8192  # a parse and a dump of this much JSON takes ~0.1 ms


class Kind(str, enum.Enum):
    """The six kinds of constraint vLLM and SGLang send."""

    JSON = "json"
    JSON_OBJECT = "json_object"
    REGEX = "regex"
    CHOICE = "choice"
    GRAMMAR = "grammar"
    STRUCTURAL_TAG = "structural_tag"


@dataclass(frozen=True)
class Constraint:
    """One request's constraint: a kind and its source text as the engine passed it."""

    kind: Kind
    source: str

    @classmethod
    def of(cls, kind: Kind | str, source: Any) -> "Constraint":
        """Build a constraint from a kind and a str, dict or list source."""
        kind = Kind(kind)
        if isinstance(source, str):
            return cls(kind, source)
        try:
            text = compact_json(source)
        except RecursionError:
            raise ConstraintError(f"{kind.value}: JSON nested too deeply") from None
        except (TypeError, ValueError) as e:
            raise ConstraintError(f"{kind.value}: not serialisable as JSON: {e}") from None
        return cls.of_canonical(kind, text)

    @classmethod
    def of_canonical(cls, kind: Kind | str, text: str) -> "Constraint":
        """A constraint from JSON text already in canonical form (``compact_json``), whose key then costs no
        re-serialisation (a 200-tool tag is ~0.2 MB: a parse and a dump per key is ~10 ms)."""
        kind = Kind(kind)
        if kind.value in _JSON_KINDS:
            _canonical_json.remember(text, kind.value, text)
        return cls(kind, text)

    def canonical(self) -> str:
        """Canonical text: JSON re-serialised compactly, key order kept (order is generation order)."""
        if self.kind in _JSON_KINDS:
            return _canonical_json(Kind(self.kind).value, self.source)
        return self.source

    def keyed_cheaply(self) -> bool:
        """Whether ``key`` costs no parse: a short or non-JSON text, or one whose canonical form is memoised."""
        return self.kind not in _JSON_KINDS or len(self.source) <= _CHEAP_KEY_CHARS \
            or (Kind(self.kind).value, self.source) in _canonical_json.cache()

    def parsed(self) -> Any:
        """The source parsed as JSON (JSON, CHOICE, STRUCTURAL_TAG kinds)."""
        try:
            return json.loads(self.source)
        except RecursionError:
            raise ConstraintError(f"{self.kind.value}: JSON nested too deeply") from None
        except json.JSONDecodeError as e:
            raise ConstraintError(f"{self.kind.value}: not valid JSON: {e}") from None

    def key(self, salt: str = "") -> str:
        """Content address: sha256 of kind, canonical text and a salt (tokenizer, versions, settings)."""
        h = hashlib.sha256()
        for part in (salt, self.kind.value, self.canonical()):
            h.update(part.encode("utf-8", "surrogatepass"))
            h.update(b"\0")
        return h.hexdigest()


def compact_json(value: Any) -> str:
    """The canonical JSON text of a value: compact, non-ASCII kept, key order kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# The API server keys a request's constraint more than once (tag trust, validation), each key a parse
# and a dump of the whole text; one memo per process makes the later ones free.
@bounded_memo(lambda: get_settings().memo_bytes, lambda args, value: len(args[1]) + (0 if value is args[1] else len(value)))
def _canonical_json(kind: str, source: str) -> str:
    return compact_json(Constraint(Kind(kind), source).parsed())
