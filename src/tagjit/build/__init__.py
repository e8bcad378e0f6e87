"""Grammar building: a constraint becomes a vocabulary-free ``xgr.Grammar`` (``grammars``), from shared EBNF pieces (``ebnf``), with every repair of xgrammar's printed EBNF kept in ``printed``."""
