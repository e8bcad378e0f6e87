"""Per-request runtime: the matcher that follows one request (``matcher``) and the per-tokenizer vocabulary tables it reads (``vocab``)."""
