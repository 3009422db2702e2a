"""Python control flow on values: fine eagerly, refused by the compiler, and the two fixes.

Eager runs Python as it goes, so ``if x.sum() > 0:`` simply looks at the number
(each call builds a fresh tape for the branch it took: a dynamic graph).
graphc traces the function once per input *signature*, with tracers that know
shapes and dtypes but no values, so it cannot pick a branch; rather than bake
in whichever branch the first call took, it raises ``TracerBoolConversionError``
naming the argument and the line, and says what to do instead.

The two fixes keep the choice inside the graph:

* ``graphc.where(cond, a, b)``: elementwise select (both sides are computed);
* ``graphc.cond(pred, true_fn, false_fn, *operands)``: a choice between two
  functions; in a trace both branches are traced and the result is selected,
  gradients flow only through the selected one.

Run:  python examples/control_flow.py
"""
import numpy as np

import eager
import graphc


def scaled(x):
    """Doubles positive-sum inputs, negates the others (value-dependent control flow)."""
    if x.sum() > 0:
        return (x * 2).sum()
    return (-x).sum()


pos = np.array([1.0, 2.0, 3.0])
neg = np.array([-1.0, -2.0, -3.0])

print("== eager: Python sees the values ==")
for arr in (pos, neg):
    x = eager.tensor(arr, requires_grad=True)
    y = scaled(x)
    y.backward()
    print(f"scaled({arr}) = {y.item():5.1f}   grad = {x.grad.numpy()}   "
          f"(tape root {type(y.grad_fn).__name__} <- "
          f"{type(y.grad_fn.next_functions[0][0]).__name__})")

print()
print("== graphc.compile: the trace has no values to branch on ==")
try:
    graphc.compile(scaled)(pos)
except graphc.TracerBoolConversionError as e:
    print(f"{type(e).__name__}: {e}")


print()
print("== fix 1: graphc.where (elementwise select, one `where` node) ==")


@graphc.compile
def scaled_where(x):
    s = x.sum()
    return graphc.where(s > 0, (x * 2).sum(), (-x).sum())


for arr in (pos, neg):
    print(f"scaled_where({arr}) = {float(scaled_where(arr)):5.1f}")
print(scaled_where.ir(pos))

print()
print("== fix 2: graphc.cond (two functions, both traced, result selected) ==")


def double_sum(x):
    return (x * 2).sum()


def neg_sum(x):
    return (-x).sum()


@graphc.compile
def scaled_cond(x):
    return graphc.cond(x.sum() > 0, double_sum, neg_sum, x)


grad_cond = graphc.grad(lambda x: graphc.cond(x.sum() > 0, double_sum, neg_sum, x))
for arr in (pos, neg):
    print(f"scaled_cond({arr}) = {float(scaled_cond(arr)):5.1f}   grad = {grad_cond(arr)}")
info = scaled_cond.cache_info()
print(f"one trace serves both branches: {info.traces} trace, {info.hits} cache hit")

# the fixes agree with eager everywhere
rng = np.random.default_rng(0)
for _ in range(20):
    arr = rng.standard_normal(3)
    want = scaled(eager.tensor(arr)).item()
    assert np.isclose(float(scaled_where(arr)), want) and np.isclose(float(scaled_cond(arr)), want)
print("where and cond agree with eager on 20 random inputs")
