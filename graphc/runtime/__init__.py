"""Runtime: JIT engines (``jit``); the calling convention and cache build on it."""
