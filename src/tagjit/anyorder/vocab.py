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
        self.words = (info.vocab_size + 31) // 32
        rel = {name: np.zeros(self.words * 32, dtype=bool) for name in
               ("S", "SE", "L", "Kq", "Nall", "Nopen", "Sw", "SEw", "Lw", "Nw")}
        open_only = re.compile(rb'[ \t\r\n]*("([^"\\]|\\.)*\\?|[-+.0-9A-Za-z]+)')
        for tid, tok in enumerate(self.tokens):
            if not tok:
                continue
            rel["S"][tid] = _closes_then_more(tok, False)
            rel["SE"][tid] = _closes_then_more(tok, True)
            rel["L"][tid] = any(c in b",}]" for c in tok)
            rel["Kq"][tid] = 0x22 in tok
            stripped = tok.strip(b" \t\r\n")
            rel["Nall"][tid] = bool(stripped)
            rel["Nopen"][tid] = bool(stripped) and open_only.fullmatch(tok) is None
            # Where whitespace itself can break a rule (after a value of an object that cannot close yet, under
            # bounded whitespace): the same, whitespace counted.
            rel["Sw"][tid] = _closes_then_more(tok, False, keep_ws=True)
            rel["SEw"][tid] = _closes_then_more(tok, True, keep_ws=True)
            rel["Lw"][tid] = any(c in b",}] \t\r\n" for c in tok)
            rel["Nw"][tid] = True
        self.relevant = {k: np.packbits(v, bitorder="little").view(np.int32) for k, v in rel.items()}


def _closes_then_more(tok: bytes, escaped: bool, keep_ws: bool = False) -> bool:
    i = 0
    if escaped:
        i = 1
    while i < len(tok):
        c = tok[i]
        if c == 0x5C:
            i += 2
            continue
        if c == 0x22:
            return bool(tok[i + 1:] if keep_ws else tok[i + 1:].strip(b" \t\r\n"))
        i += 1
    return False


def vocab_tables(info: xgr.TokenizerInfo) -> VocabTables:
    """The vocabulary tables of a tokenizer, computed once per tokenizer."""
    return per_tokenizer(info, "any_order.vocab_tables", VocabTables)
