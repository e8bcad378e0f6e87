"""Per-tokenizer tables of the any-order filter: which tokens can matter in each lexer situation."""

from __future__ import annotations

import re

import numpy as np
import xgrammar as xgr

from tagjit.runtime.vocab import per_tokenizer, token_bytes


class VocabTables:
    """Per-tokenizer tables: each token's bytes and which tokens can matter in each situation."""

    def __init__(self, info: xgr.TokenizerInfo) -> None:
        self.tokens: list[bytes] = token_bytes(info)
        self.extra: dict[str, object] = {}  # tables the filter makes when first needed (filter._count_tables)
        self.longest = max(map(len, self.tokens), default=0)  # bytes of the longest token (at least its characters)
        self.words = (info.vocab_size + 31) // 32
        rel = {name: np.zeros(self.words * 32, dtype=bool) for name in
               ("S", "SE", "L", "Kq", "Nall", "Nopen", "Sw", "SEw", "Lw", "Nw", "Xc")}
        open_only = re.compile(rb'[ \t\r\n]*("([^"\\]|\\.)*\\?|[-+.0-9A-Za-z]+)')
        for tid, tok in enumerate(self.tokens):
            if not tok:
                continue
            closed, closed_escaped = _string_rest(tok), _escaped_rest(tok)  # after a string this token ends
            rel["S"][tid] = bool(closed and closed.strip(b" \t\r\n"))
            rel["SE"][tid] = bool(closed_escaped and closed_escaped.strip(b" \t\r\n"))
            rel["L"][tid] = any(c in b",}]" for c in tok)
            rel["Kq"][tid] = 0x22 in tok
            stripped = tok.strip(b" \t\r\n")
            rel["Nall"][tid] = bool(stripped)
            rel["Nopen"][tid] = bool(stripped) and open_only.fullmatch(tok) is None
            rel["Xc"][tid] = 0x7D in tok or 0x5D in tok  # only a closing bracket leads out of a value nothing tracks
            # Where whitespace itself can break a rule (after a value of an object that cannot close yet, under
            # bounded whitespace): the same, whitespace counted.
            rel["Sw"][tid] = bool(closed)
            rel["SEw"][tid] = bool(closed_escaped)
            rel["Lw"][tid] = any(c in b",}] \t\r\n" for c in tok)
            rel["Nw"][tid] = True
        self.relevant = {k: np.packbits(v, bitorder="little").view(np.int32) for k, v in rel.items()}
        # Classes of fewer tokens than the row has words, as (packed row, token ids, each one's word, each one's bit):
        # reading those bits costs less than scanning the row.
        self.members: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        for name, packed in self.relevant.items():
            ids = np.flatnonzero(rel[name])
            if len(ids) < self.words:
                self.members[name] = (packed, ids, ids >> 5, np.left_shift(1, ids & 31).astype(np.uint32).view(np.int32))
        self.rests: dict[str, np.ndarray] = {}
        self.rest_text: list[bytes] = []
        ids: dict[bytes, int] = {}
        for lexeme, rest_of in (("S", _string_rest), ("SE", _escaped_rest), ("L", _literal_rest), ("V", _value_rest),
                                ("X1", _opaque_rest), ("X2", lambda tok: _opaque_rest(tok, 2))):
            table = self.rests[lexeme] = np.full(self.words * 32, STAYS, dtype=np.int32)
            for tid, tok in enumerate(self.tokens):
                rest = rest_of(tok)
                if rest is None:
                    continue
                if rest is _CANNOT_START:
                    table[tid] = BREAKS
                    continue
                rid = ids.get(rest)
                if rid is None:
                    rid = ids[rest] = len(self.rest_text)
                    self.rest_text.append(rest)
                table[tid] = rid


# Where a token leaves the string, number or value it starts inside (``VocabTables.rests``): an index into
# ``rest_text``, or one of these.
STAYS = -1  # the token ends inside it
BREAKS = -2  # the token cannot start a value there
_CANNOT_START = object()  # (what _value_rest returns for BREAKS)
STRING_END = re.compile(rb'(?:[^"\\]|\\.)*"', re.DOTALL)
LITERAL_END = re.compile(rb"[ \t\r\n,}\]]")  # where a number or literal ends (the filter's stepping too)
_WS_RUN = re.compile(rb"[ \t\r\n]*")


def _string_rest(tok: bytes, start: int = 0) -> bytes | None:
    """What follows the quote that closes the string tok starts inside (None: it does not close)."""
    if 0x22 not in tok:
        return None
    m = STRING_END.match(tok, start)
    return tok[m.end():] if m else None


def _escaped_rest(tok: bytes) -> bytes | None:
    return _string_rest(tok, 1) if tok else None


def _literal_rest(tok: bytes, start: int = 0) -> bytes | None:
    m = LITERAL_END.search(tok, start)
    return tok[m.start():] if m else None


def _opaque_rest(tok: bytes, depth: int = 1) -> bytes | None:
    """What follows the bracket that closes the depth open ones of a value nothing tracks (None: tok stays inside)."""
    if 0x7D not in tok and 0x5D not in tok:
        return None
    i, n = 0, len(tok)
    while i < n:
        b = tok[i]
        if b == 0x22:
            m = STRING_END.match(tok, i + 1)
            if m is None:
                return None
            i = m.end()
            continue
        if b == 0x7B or b == 0x5B:
            depth += 1
        elif b == 0x7D or b == 0x5D:
            depth -= 1
            if depth == 0:
                return tok[i + 1:]
        i += 1
    return None


def _value_rest(tok: bytes) -> bytes | object | None:
    """What follows the first whole value tok writes at a value position (the filter's view: brackets counted,
    strings skipped); None if the value does not end within tok, _CANNOT_START if tok cannot start one."""
    i = _WS_RUN.match(tok).end()
    if i == len(tok):
        return None
    b = tok[i]
    if b in b"}],:":
        return _CANNOT_START
    if b == 0x22:
        return _string_rest(tok, i + 1)
    if b != 0x7B and b != 0x5B:
        return _literal_rest(tok, i)
    return _opaque_rest(tok[i + 1:])


def vocab_tables(info: xgr.TokenizerInfo) -> VocabTables:
    """The vocabulary tables of a tokenizer, computed once per tokenizer."""
    return per_tokenizer(info, "any_order.vocab_tables", VocabTables)
