"""``dependencies`` (drafts 4-7), ``dependentRequired`` and ``dependentSchemas`` (2019-09+) as an exact anyOf.

A dependency holds for objects only: if the object has the trigger name, it has the names the dependency lists and
validates against its schema. xgrammar reads none of these keywords, so a node with them becomes an ``anyOf`` with
one branch per set of trigger names that can be present together: the branch requires those names and every name
their dependencies require, takes their dependent schemas (``normalize``'s allOf merge), and forbids the other trigger
names (``pattern_properties.without_names``: left out of a closed object's ``properties``; on an object open to
undeclared names, taken out of the key languages of its patterns and of ``additionalProperties``). Sets that
contradict themselves (a present name requires an absent one) are never built, so mutual dependencies give two
branches, not four. Values of other types keep a branch of their own where the node allows them. The branches are
disjoint: each says which triggers are present.

More than ``MAX_BRANCHES`` branches, or a dependent schema the merge cannot say, are refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from tagjit.errors import EmptySchemaError, UnsupportedFeatureError
from tagjit.schema.keywords import PASSIVE, TYPE_KEYWORDS, subschemas
from tagjit.schema.pattern_properties import admits, without_names

KEYWORDS = ("dependencies", "dependentRequired", "dependentSchemas")
DEPENDENCY_KEYWORDS = frozenset(KEYWORDS)
# Most branches one node may become (each is a copy of the object's schema); more are refused by name.
MAX_BRANCHES = 64
# Most partial combinations the branch search may visit before it gives up (refused like too many branches).
_MAX_VISITS = 64 * MAX_BRANCHES

_ALL_TYPES = ("null", "boolean", "object", "array", "number", "string")
_MISSING = object()

Merge = Callable[[Any, Any, str], Any]
Inline = Callable[[dict, str], Any]


@dataclass
class _Trigger:
    """What one trigger name brings when it is present."""

    names: list[str] = field(default_factory=list)  # required with it (its lists, its schemas' own ``required``)
    schemas: list[tuple[str, Any]] = field(default_factory=list)  # (keyword, dependent schema)
    never: bool = False  # a dependent schema ``false``: the name cannot be present


def expand_dependencies(n: dict, where: str, strict: bool, merge: Merge, inline: Inline) -> dict:
    """The node with its dependency keywords rewritten as an exact anyOf over the trigger names present."""
    rest = {k: v for k, v in n.items() if k not in DEPENDENCY_KEYWORDS}
    triggers = _triggers(n)
    if not triggers:
        return rest
    if "$ref" in rest:  # xgrammar reads nothing beside a $ref: its target takes the branches
        rest = _inlined(rest, where, inline)
    if not _allows(rest, "object"):
        return rest
    if any(isinstance(rest.get(k), list) for k in ("anyOf", "oneOf")):
        # normalize merges the siblings, these keywords with them, into each branch, whose node expands them there
        return {**rest, **{k: n[k] for k in KEYWORDS if k in n}}
    own = {id(n[k]) for k in KEYWORDS if k in n}
    return _Expansion(rest, triggers, where, strict, merge, _keyword(n), own).node()


def _triggers(n: dict) -> dict[str, _Trigger]:
    """Each trigger name (in the order the keywords list them) with what it brings; those bringing nothing left out."""
    out: dict[str, _Trigger] = {}
    for kw in KEYWORDS:
        deps = n.get(kw)
        if not isinstance(deps, dict):
            continue
        for name, dep in deps.items():
            t = out.setdefault(name, _Trigger())
            if isinstance(dep, list):
                t.names += [x for x in dep if isinstance(x, str) and x not in t.names]
            elif dep is False:
                t.never = True
            elif isinstance(dep, dict) and {k: v for k, v in dep.items() if k not in PASSIVE}:
                t.schemas.append((kw, dep))
                own = dep.get("required")
                t.names += [x for x in own if isinstance(x, str) and x not in t.names] if isinstance(own, list) else []
    return {name: t for name, t in out.items() if t.names or t.schemas or t.never}


def _keyword(n: dict) -> str:
    return next(k for k in KEYWORDS if k in n)


def _inlined(rest: dict, where: str, inline: Inline) -> dict:
    target = inline(rest, where)
    if target is False:
        raise EmptySchemaError(f"JSON schema at '{where}' accepts no value: its $ref target conflicts with its "
                               "other keywords")
    return target if isinstance(target, dict) else {}


def _types(n: dict) -> list[str]:
    """The JSON types a node allows as normalize reads it (a node without ``type`` takes those of its keywords)."""
    t = n.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str)]
    if any(k in n for k in ("enum", "const", "$ref", "anyOf", "oneOf", "allOf", "not")):
        return list(_ALL_TYPES)
    inferred = [name for name, kws in TYPE_KEYWORDS.items() if any(k in n for k in kws)]
    return inferred or list(_ALL_TYPES)


def _allows(n: dict, type_name: str) -> bool:
    return type_name in _types(n)


class _Expansion:
    """The branches of one node: a search over which trigger names are present, then one schema per result."""

    def __init__(self, rest: dict, triggers: dict[str, _Trigger], where: str, strict: bool, merge: Merge,
                 keyword: str, own: set[int]) -> None:
        # Annotations and definitions stay at the node (x-any-order too: one branch takes it back, several declare
        # their names in order, as the any-order filter cannot tell them apart).
        self.top = {k: v for k, v in rest.items() if k in PASSIVE}
        self.core = {k: v for k, v in rest.items() if k not in PASSIVE}
        self.where, self.strict, self.merge, self.keyword, self.own = where, strict, merge, keyword, own
        props = self.core.get("properties")
        self.props: dict = props if isinstance(props, dict) else {}
        required = self.core.get("required")
        self.required = [k for k in required if isinstance(k, str)] if isinstance(required, list) else []
        self.closed = _closed(self.core, strict)
        # A name the object's schema gives no value (false) is never present: its dependency holds vacuously.
        self.triggers = {name: t for name, t in triggers.items() if self.props.get(name, True) is not False}
        self.visits = 0

    def node(self) -> dict:
        always = self._always_present()
        optional = [name for name in self.triggers if name not in always]
        branches: list[Any] = []
        for present, absent in self._combinations(always, optional):
            b = self._branch(present, absent)
            if b is not False and b not in branches:
                branches.append(b)
        others = [t for t in _types(self.core) if t != "object"]
        if others:
            branches.append(self._other_types(others))
        if not branches:
            raise EmptySchemaError(f"JSON schema at '{self.where}' accepts no value: no set of its trigger names "
                                   f"satisfies its {self.keyword}")
        if len(branches) == 1:
            return {**self.top, **branches[0]}
        return {**self.top, "anyOf": branches}

    # -- which names are present ---------------------------------------------------------------------
    def _always_present(self) -> set[str]:
        """The names every object has: its required ones and, transitively, those their dependencies require."""
        always = set(self.required)
        todo = [name for name in self.triggers if name in always]
        while todo:
            for x in self.triggers[todo.pop()].names:
                if x not in always:
                    always.add(x)
                    if x in self.triggers:
                        todo.append(x)
        return always

    def _combinations(self, always: set[str], optional: list[str]) -> list[tuple[list[str], set[str]]]:
        """(present triggers, absent triggers) for every consistent choice of the optional triggers."""
        out: list[tuple[list[str], set[str]]] = []
        base = [name for name in self.triggers if name in always]
        if any(self.triggers[name].never for name in base) or any(self._impossible(x) for name in base
                                                                 for x in self.triggers[name].names):
            return out
        self._search(optional, 0, base, set(), set(always), out)
        return out

    def _search(self, optional: list[str], i: int, present: list[str], absent: set[str], required: set[str],
                out: list) -> None:
        self.visits += 1
        if self.visits > _MAX_VISITS or len(out) > MAX_BRANCHES:
            raise UnsupportedFeatureError(f"{self.keyword} with more than {MAX_BRANCHES} combinations of trigger "
                                          "names present", self.where)
        if i == len(optional):
            if self._admitted(present, required):
                out.append((present, absent))
            return
        name = optional[i]
        t = self.triggers[name]
        if not t.never and not any(x in absent or self._impossible(x) for x in t.names):
            self._search(optional, i + 1, [*present, name], absent, required | set(t.names), out)
        if name not in required:
            self._search(optional, i + 1, present, absent | {name}, required, out)

    def _impossible(self, name: str) -> bool:
        """Whether no object of the node can have the name (nothing lets it in)."""
        if name in self.props:
            return self.props[name] is False
        patterns = self.core.get("patternProperties")
        if isinstance(patterns, dict) and any(admits(key, name) for key in patterns):
            return False
        return self.core.get("additionalProperties") is False

    def _admitted(self, present: list[str], required: set[str]) -> bool:
        """An undeclared trigger of a closed object is present only where something requires it (required names
        are let in, as normalize lets in the names an object requires)."""
        return not self.closed or all(name in self.props or name in required for name in present)

    # -- one branch ----------------------------------------------------------------------------------
    def _branch(self, present: list[str], absent: set[str]) -> Any:
        required = list(dict.fromkeys([*self.required, *(x for name in present
                                                          for x in (name, *self.triggers[name].names))]))
        b: Any = {**self.core, "type": "object"}
        if required:
            b["required"] = required
        for name in present:
            for kw, schema in self.triggers[name].schemas:
                b = self._merged(b, schema, kw, name)
                if b is False:
                    return False
        return _in_order(self._forbid(b, absent) if absent else b, list(self.props))

    def _merged(self, b: Any, schema: Any, kw: str, name: str) -> Any:
        try:
            out = self.merge(b, schema, f"{self.where}/{kw}/{name}")
        except UnsupportedFeatureError as e:
            raise UnsupportedFeatureError(f"{kw} of {name!r} whose schema tagjit cannot merge ({e.feature})",
                                          self.where) from None
        except EmptySchemaError:
            return False
        # The merge writes out a $ref the schema constrains; if that copy holds these very dependencies, each
        # expansion would write out another (a recursive definition, unrolled without end).
        if any(id(sub[k]) in self.own for sub, _ in subschemas(out) for k in KEYWORDS if k in sub):
            raise UnsupportedFeatureError(f"{kw} of {name!r} whose schema constrains a $ref back to its own object",
                                          self.where)
        return out

    def _forbid(self, b: Any, absent: set[str]) -> Any:
        """``b`` with the absent names forbidden (in each anyOf/oneOf branch a dependent schema brought)."""
        if not isinstance(b, dict):
            return b
        comb = next((k for k in ("anyOf", "oneOf") if isinstance(b.get(k), list)), None)
        if comb is not None:
            parts = [p for p in (self._forbid(x, absent) for x in b[comb]) if p is not False]
            return {**b, comb: parts} if parts else False
        if b.get("unevaluatedProperties", True) is not True:
            raise UnsupportedFeatureError(f"{self.keyword} whose object sets unevaluatedProperties where a trigger "
                                          "name must be absent", self.where)
        required = b.get("required") if isinstance(b.get("required"), list) else []
        if any(name in absent for name in required):
            return False
        return without_names(b, [name for name in self.triggers if name in absent], self.strict)

    def _other_types(self, others: list[str]) -> dict:
        out = {k: v for k, v in self.core.items() if k not in TYPE_KEYWORDS["object"]}
        out["type"] = others[0] if len(others) == 1 else others
        return out


def _in_order(b: Any, names: list[str]) -> Any:
    """``b`` with the node's properties first, in the node's order (a merged dependent schema's own names follow):
    property order is generation order, and the merge puts a combinator's branch first."""
    if not isinstance(b, dict):
        return b
    comb = next((k for k in ("anyOf", "oneOf") if isinstance(b.get(k), list)), None)
    if comb is not None:
        return {**b, comb: [_in_order(x, names) for x in b[comb]]}
    props = b.get("properties")
    if not isinstance(props, dict) or list(props)[:len(names)] == names:
        return b
    ordered = {k: props[k] for k in names if k in props}
    ordered.update((k, v) for k, v in props.items() if k not in ordered)
    return {**b, "properties": ordered}


def _closed(core: dict, strict: bool) -> bool:
    """Whether the object takes no name it does not declare (so leaving a name out of ``properties`` forbids it)."""
    if "patternProperties" in core:
        return False
    extra = core.get("additionalProperties", core.get("unevaluatedProperties", _MISSING))
    if extra is not _MISSING:
        return extra is False
    # xgrammar's strict mode closes an object that declares names; one that declares none takes any.
    return strict and ("properties" in core or "required" in core)
