"""Tool-call structural tags compiled per part, so a new combination of known tools compiles in little time.

xgrammar compiles a structural tag as one grammar and reuses nothing across combinations: the same 200
tools in another order, or 199 of them, cost a full compile (~0.5 s with a 150k vocabulary), and most of
that cost is the begin literals with the tool names. A tag of the tool-call shape (a tree of ``sequence``,
``or``, ``tags_with_separator`` and ``const_string`` whose leaves are ``tag`` nodes) is split here into:

- the *outer* language: every literal (begins, ends, separators, constants) as a small automaton that
  tagjit runs itself. It needs no compile: its masks come from a sorted index of the vocabulary and are
  memoised per automaton state;
- one xgrammar grammar per tag content (a *unit*), compiled once and cached under an order-preserving
  key, so the same tool in any other combination is a cache hit.

Contents must be JSON-style schemas (with regexes and constants around them, as for ``{index}`` formats);
XML argument styles, raw grammars and free text inside a tag keep the whole-tag compile (``plan`` returns None).
Free text with calls where a trigger appears (``triggered_tags``, tool_choice=auto) is split too: the text is a unit
of its own, xgrammar's TagDispatch with the same trigger and excludes dispatching to nothing, done exactly where the
trigger completes (the output may end inside it), then each call's begin less the trigger is a literal (a wrapper's
begin less the trigger, its calls and its end, where the calls sit in one). A JSON value
outside any tag (an agent request's final answer beside its calls) is a unit too, a *bare* one: no begin literal
leads to it, its own first byte enters it, so no literal beside it may begin with a byte it may begin with
(llama3_json's calls are bare JSON objects as well: that tag compiles whole).

A composite matcher runs the automaton until a begin literal completes, then that tag's unit matcher
until it completes, then the automaton again. A token may straddle a boundary (``": {"``, ``"}}"``): the
mask there is the union of the current part's own mask and the tokens ``a + b`` where the current part
accepts ``a`` and completes and the next part accepts ``b``. Where the split of a token between parts
could be ambiguous the matcher switches, exactly, to the full grammar (compiled then) and replays.

``assemble`` (imported by the compile service, not here) builds a composite from units it compiles and caches.
"""

from tagjit.compile.composite.matcher import CompositeGrammar, CompositeMatcher, Unit, make_unit
from tagjit.compile.composite.plan import Ambiguous, Plan, plan
from tagjit.compile.composite.vocab import VocabIndex, vocab_index

__all__ = ["Plan", "plan", "VocabIndex", "vocab_index", "Unit", "make_unit", "CompositeGrammar",
           "CompositeMatcher", "Ambiguous"]
