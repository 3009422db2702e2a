"""Backend: lowering to LLVM IR, vectorizable math (``vecmath``) and BLAS calls (``blas``)."""
