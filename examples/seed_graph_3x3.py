"""The seeds' 3x3 graph, run both ways: eager's tape and graphc's compiled graph.

    b = w1 * a;  c = w2 * a;  d = w3 * b + w4 * c;  L = (10 - d).sum()

Part 1 runs it on eager (``import eager as torch``) as the seed tutorials do:
the leaves have no ``grad_fn``, every result has one, and ``next_functions``
link each node to the nodes (or leaf ``AccumulateGrad`` sinks) it came from.
``L.backward()`` walks that tape, fills the leaves' ``.grad`` and frees it.

Part 2 hands the same Python function to ``graphc.value_and_grad``: it is traced
once into a static graph, differentiated symbolically (the backward nodes are
printed in the ``grad`` IR stage), compiled to native code and called.  The
five gradients agree with eager's.

Run:  python examples/seed_graph_3x3.py
The function and its example inputs also serve the command line:
      graphc compare examples/seed_graph_3x3.py:L3
      graphc ir examples/seed_graph_3x3.py:L3 --stage grad
"""
import numpy as np

import eager as torch
import graphc


def L3(a, w1, w2, w3, w4):
    """The seeds' graph; the same code runs on Tensors and on graphc tracers."""
    b = w1 * a
    c = w2 * a
    d = w3 * b + w4 * c
    return (10 - d).sum()


def L3_example_args():
    """Five 3x3 float64 arrays (``graphc compare``/``graphc ir`` use them)."""
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal((3, 3)) for _ in range(5))


def eager_part():
    """Part 1: define-by-run.  Returns the leaves (with .grad filled) and L."""
    torch.manual_seed(0)
    print("== eager: the tape is built while the code runs ==")
    leaves = {name: torch.randn((3, 3), requires_grad=True)
              for name in ("a", "w1", "w2", "w3", "w4")}
    a, w1, w2, w3, w4 = leaves.values()

    b = w1 * a
    c = w2 * a
    d = w3 * b + w4 * c
    L = (10 - d).sum()

    print("The grad fn for a is", a.grad_fn)
    print("The grad fn for d is", type(d.grad_fn).__name__)
    print("a.is_leaf:", a.is_leaf, "  d.is_leaf:", d.is_leaf,
          "  L.requires_grad:", L.requires_grad)
    print()
    print("grad_fn graph of L, walking next_functions from L.grad_fn:")
    names = {id(t): n for n, t in leaves.items()}
    stack = [(L.grad_fn, 0)]
    while stack:
        node, depth = stack.pop()
        label = type(node).__name__
        if label == "AccumulateGrad":
            label += f" -> {names[id(node.variable)]}.grad"
        print("  " * (depth + 1) + label)
        stack.extend((nxt, depth + 1) for nxt, _ in reversed(node.next_functions)
                     if nxt is not None)

    L.backward()
    print()
    print("L =", L.item())
    print("a.grad =")
    print(a.grad)
    try:
        L.backward()
    except RuntimeError as e:
        print("second backward:", str(e).split(".")[0] + ".")
    return leaves, L


def compiled_part(leaves, L):
    """Part 2: define-then-run, on the same values."""
    print()
    print("== graphc: trace once, differentiate the graph, compile, call ==")
    arrays = [t.detach().numpy() for t in leaves.values()]
    vg = graphc.value_and_grad(L3, argnums=(0, 1, 2, 3, 4))
    value, grads = vg(*arrays)

    f = graphc.compile(L3)
    print("traced IR (the forward graph):")
    print(f.ir(*arrays))
    print("grad IR (forward + backward nodes, the backward marked):")
    print(f.ir(*arrays, stage="grad"))

    print(f"L: eager {L.item():.6f}   compiled {float(value):.6f}")
    for (name, leaf), gc in zip(leaves.items(), grads):
        ge = leaf.grad.numpy()
        print(f"d L / d {name:<2}: max |eager - compiled| = {np.max(np.abs(ge - gc)):.1e}")
        assert np.allclose(ge, gc, rtol=1e-5, atol=1e-5), name
    # analytic: dL/da = -(w1*w3 + w2*w4)
    analytic = -(arrays[1] * arrays[3] + arrays[2] * arrays[4])
    assert np.allclose(grads[0], analytic, rtol=1e-5, atol=1e-5)
    print("gradients agree (and dL/da = -(w1*w3 + w2*w4) analytically)")


if __name__ == "__main__":
    compiled_part(*eager_part())
