"""Compiling and caching: the per-tokenizer compile service (``service``), its caches (``cache``), the JIT policy (``jit``), warm-up lists (``warmup``) and tool-call composites (``composite``)."""
