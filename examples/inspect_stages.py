"""Every stage graphc goes through for one small function, printed in order.

The function is benchmark W2, ``sum(tanh(x*w + b)**2)``, differentiated with
respect to the scalars ``w`` and ``b``.  The script prints:

1. the traced graph (what the tracer recorded from the Python code);
2. the grad stage (the traced graph plus the backward nodes autodiff emits);
3. the optimized graph (after simplify / fold / cse / dce), with the pass log;
4. the native plan (forward and backward fused into one loop over x);
5. an excerpt of the generated LLVM IR, and of the IR after LLVM's optimizer
   (vectorized: ``<4 x double>`` lanes with AVX2);
6. an excerpt of the host assembly;
7. the traced graph as Graphviz DOT, written to a temporary file.

Run:  python examples/inspect_stages.py
or one stage at a time:  graphc ir examples/inspect_stages.py:loss --stage plan
"""
import os
import re
import tempfile

import numpy as np

import graphc


def loss(x, w, b):
    return ((x * w + b).tanh() ** 2).sum()


def loss_example_args():
    """100k points in [-2, 2] and two 0-d weights.  (At this size the backward's
    broadcast seed gradient stays a stride-0 view: constant folding materializes
    arrays of up to 65536 elements only.)"""
    return np.linspace(-2.0, 2.0, 100_000), np.array(0.5), np.array(0.1)


def section(title):
    print()
    print(f"===== {title} " + "=" * max(0, 70 - len(title)))


def main():
    x, w, b = loss_example_args()
    f = graphc.compile(loss)                                          # the forward alone
    step = graphc.compile(graphc.value_and_grad(loss, argnums=(1, 2)))  # value + dL/dw, dL/db

    value, (dw, db) = step(x, w, b)
    print(f"loss = {float(value):.6f}   dL/dw = {float(dw):.6f}   dL/db = {float(db):.6f}")
    # the same numbers from numpy, by hand: d/dz tanh(z)^2 = 2 tanh(z) (1 - tanh(z)^2)
    t = np.tanh(x * w + b)
    dz = 2 * t * (1 - t * t)
    assert np.allclose([value, dw, db], [np.sum(t * t), np.sum(dz * x), np.sum(dz)], rtol=1e-10)

    section("1. traced: f.ir(x, w, b)")
    print(f.ir(x, w, b))

    section('2. grad: f.ir(x, w, b, stage="grad")')
    print(f.ir(x, w, b, stage="grad"))

    section('3. optimized: step.ir(x, w, b, stage="optimized")')
    print(step.ir(x, w, b, stage="optimized"))
    st = step.stats(x, w, b)
    print(f"{st['traced_nodes']} traced nodes -> {st['optimized_nodes']} optimized nodes; "
          f"compile took {st['compile_seconds'] * 1e3:.0f} ms")

    section("4. plan: step.plan(x, w, b)")
    print(step.plan(x, w, b))

    section("5a. LLVM IR (as generated), the loop kernel: step.llvm_ir(x, w, b)")
    llvm = step.llvm_ir(x, w, b)
    lines = llvm.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("define internal i32 @\"k0"))
    print("\n".join(lines[start:start + 40]))
    print(f"  ... ({len(lines)} lines in all)")

    section("5b. LLVM IR after LLVM's optimizer, vector lines: llvm_ir(..., optimized=True)")
    opt = step.llvm_ir(x, w, b, optimized=True).splitlines()
    vec = [ln.strip() for ln in opt if re.search(r"<\d+ x double>", ln) and " = f" in ln]
    print("\n".join(vec[:12]))
    print(f"  ... ({len(vec)} vector floating-point instructions, {len(opt)} lines in all)")

    section("6. host assembly: step.asm(x, w, b)")
    asm = step.asm(x, w, b).splitlines()
    packed = re.compile(r"^\s+v?(fmadd|fmul|add|sub|mul|div|max|min)\w*pd\s|\.2d\b")  # x86, arm64
    body = [ln for ln in asm if packed.search(ln)]
    print("\n".join(body[:12]))
    print(f"  ... ({len(body)} arithmetic instructions on packed doubles, {len(asm)} lines in all)")

    section("7. DOT: f.graph(x, w, b).to_dot()")
    path = os.path.join(tempfile.gettempdir(), "graphc_loss.dot")     # overwritten each run
    with open(path, "w") as fh:
        fh.write(f.graph(x, w, b).to_dot())
    print(f"wrote {path}   (render it: dot -Tsvg {path} -o loss.svg)")
    print("\n".join(open(path).read().splitlines()[:6]))
    print("  ...")


if __name__ == "__main__":
    main()
