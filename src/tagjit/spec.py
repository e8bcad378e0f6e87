"""What a request asks for: the constraint kinds and their order-preserving canonical keys."""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from .errors import ConstraintError


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
        if not isinstance(source, str):
            try:
                source = json.dumps(source, ensure_ascii=False)
            except RecursionError:
                raise ConstraintError(f"{kind.value}: JSON nested too deeply") from None
            except (TypeError, ValueError) as e:
                raise ConstraintError(f"{kind.value}: not serialisable as JSON: {e}") from None
        return cls(kind, source)

    def canonical(self) -> str:
        """Canonical text: JSON re-serialised compactly, key order kept (order is generation order)."""
        if self.kind in (Kind.JSON, Kind.CHOICE, Kind.STRUCTURAL_TAG):
            return json.dumps(self.parsed(), separators=(",", ":"), ensure_ascii=False)
        return self.source

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
