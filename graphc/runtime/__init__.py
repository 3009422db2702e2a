"""Runtime: LLVM engines (``llvm_engine``); the calling convention and cache build on it."""
