"""Higher-order derivatives both ways, checked against the analytic formulas.

    f(x)    = sin(x) * exp(x)
    f'(x)   = e^x (sin x + cos x)
    f''(x)  = 2 e^x cos x
    f'''(x) = 2 e^x (cos x - sin x)

eager: ``autograd.grad(..., create_graph=True)`` records a tape *while*
differentiating (the VJP rules run on tensors that require grad), so the
gradient has a ``grad_fn`` and can be differentiated again.

graphc: gradients are graphs, so ``graphc.grad(graphc.grad(graphc.grad(f)))``
is one graph -- forward, backward, backward of the backward... -- traced once
and compiled once to native code.

Run:  python examples/higher_order.py
"""
import numpy as np

import eager
import graphc


def f(x):
    return x.sin() * x.exp()


def analytic(x):
    e, s, c = np.exp(x), np.sin(x), np.cos(x)
    return e * (s + c), 2 * e * c, 2 * e * (c - s)


xs = np.array([-1.0, 0.0, 0.5, 2.0])

print("== eager: create_graph=True makes the gradient differentiable ==")
x = eager.tensor(xs, requires_grad=True)
y = f(x).sum()
(d1,) = eager.autograd.grad(y, x, create_graph=True)
print("d1 =", d1)
(d2,) = eager.autograd.grad(d1.sum(), x, create_graph=True)
print("d2 =", d2)
(d3,) = eager.autograd.grad(d2.sum(), x)
print("d3 =", d3, " (no create_graph on the last one: no grad_fn)")
eager_derivs = [d1.detach().numpy(), d2.detach().numpy(), d3.numpy()]

print()
print("the seed's form: backward(create_graph=True) leaves a differentiable .grad")
x2 = eager.tensor(xs, requires_grad=True)
f(x2).sum().backward(create_graph=True)
print("x2.grad =", x2.grad)

print()
print("== graphc: grad of grad of grad, one compiled graph ==")
d1c = graphc.grad(lambda x: f(x).sum())
d2c = graphc.grad(lambda x: d1c(x).sum())
d3c = graphc.compile(graphc.grad(lambda x: d2c(x).sum()))
compiled_derivs = [d1c(xs), d2c(xs), d3c(xs)]
st = d3c.stats(xs)
n_f = graphc.compile(lambda x: f(x).sum()).stats(xs)["traced_nodes"]
print(f"f''' compiled: {st['traced_nodes']} traced nodes (f alone: {n_f}), "
      f"{st['optimized_nodes']} after the passes, {st['kernels']} native kernel(s)")

print()
print(f"{'x':>6} {'order':>5} {'analytic':>12} {'eager':>12} {'compiled':>12}")
for order, (want, ev, cv) in enumerate(zip(analytic(xs), eager_derivs, compiled_derivs), 1):
    for i, xv in enumerate(xs):
        print(f"{xv:6.2f} {order:5d} {want[i]:12.8f} {ev[i]:12.8f} {cv[i]:12.8f}")
    assert np.allclose(ev, want, rtol=1e-12, atol=1e-12), order
    assert np.allclose(cv, want, rtol=1e-12, atol=1e-12), order
print("eager and compiled derivatives of orders 1-3 match the analytic values (1e-12)")

print()
print("Hessian-vector product, compiled: grad of (grad(g)(x) . v)")


def g(x):
    return (x[0] ** 2) * x[1] + x[1].exp()


hvp = graphc.compile(graphc.grad(lambda x, v: (graphc.grad(g)(x) * v).sum()))
p, v = np.array([1.0, 2.0]), np.array([1.0, -1.0])
H = np.array([[2 * p[1], 2 * p[0]], [2 * p[0], np.exp(p[1])]])     # analytic Hessian
print("H @ v =", hvp(p, v), "  analytic:", H @ v)
assert np.allclose(hvp(p, v), H @ v)
