"""Issue figures for loops and transforms measured side by side with JAX (when
importable; JAX is never a dependency): the W9 RNN with ``scan`` against
``jax.lax.scan``, the same RNN unrolled against JAX's jit of the unrolled loop, and
per-example gradients with ``vmap(grad)``.

Run: ``python -m graphc.tools.bench_jax_loops`` in an environment that has JAX.
Every row is a median of repeated calls after a first call; first calls are each a
fresh compile in this process (one small compile first takes the one-time start-up).
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from .bench_models import RNN_STEPS, rnn_args, rnn_loss, rnn_loss_loop


def _median(fn, n: int = 30) -> float:
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def _first(fn) -> tuple:
    t, c = time.perf_counter(), time.thread_time()
    fn()
    return time.perf_counter() - t, time.thread_time() - c


def _block(x):
    leaves = x if isinstance(x, (tuple, list)) else [x]
    for v in leaves:
        if isinstance(v, (tuple, list)):
            _block(v)
        elif hasattr(v, "block_until_ready"):
            v.block_until_ready()
    return x


def run(unrolled_steps: int = RNN_STEPS) -> list:
    from types import SimpleNamespace

    from ..api import compile as graphc_compile
    from ..transforms import grad, value_and_grad, vmap

    # the top-level names this tool uses, imported from their layers (tools sits below
    # the package's top level)
    graphc = SimpleNamespace(
        compile=graphc_compile, value_and_grad=value_and_grad, grad=grad, vmap=vmap
    )
    rows = []
    graphc.compile(lambda x: (x * 2).sum())(np.ones(3, np.float32))
    try:
        import jax
        import jax.numpy as jnp

        jax.jit(lambda x: (x * 2).sum())(jnp.ones(3)).block_until_ready()
    except Exception:  # JAX not importable: graphc's rows only
        jax = None
    args = rnn_args()

    # --- W9: scan ---------------------------------------------------------------------
    vg = graphc.value_and_grad(rnn_loss, argnums=(0, 1, 2))
    f = _first(lambda: vg(*args))
    rows.append(("RNN scan 300 steps, graphc", f, _median(lambda: vg(*args))))
    if jax is not None:
        from .bench_jax import rnn_loss as jax_rnn_loss

        jvg = jax.jit(jax.value_and_grad(jax_rnn_loss(jax), argnums=(0, 1, 2)))
        jargs = [jnp.asarray(a) for a in args]
        f = _first(lambda: _block(jvg(*jargs)))
        rows.append(
            ("RNN scan 300 steps, JAX lax.scan jit", f, _median(lambda: _block(jvg(*jargs))))
        )
        jv, jg = jvg(*jargs)
        gv, gg = vg(*args)
        assert np.isclose(float(jv), float(gv), rtol=1e-4), (float(jv), float(gv))
        for a, b in zip(jg, gg):
            assert np.allclose(np.asarray(a), b, rtol=1e-3, atol=1e-5)

    # --- the same RNN unrolled by a Python loop -----------------------------------------------
    ua = rnn_args(unrolled_steps)
    uvg = graphc.value_and_grad(rnn_loss_loop, argnums=(0, 1, 2))
    f = _first(lambda: uvg(*ua))
    rows.append((f"RNN unrolled {unrolled_steps} steps, graphc", f, _median(lambda: uvg(*ua), 10)))
    if jax is not None:

        def jloop(Wx, Wh, b, xs, h0):
            h, total = h0, 0.0
            for t in range(xs.shape[0]):
                h = jnp.tanh(xs[t] @ Wx + h @ Wh + b)
                total = total + (h * h).sum()
            return total / (xs.shape[0] * h0.shape[0] * h0.shape[1])

        juvg = jax.jit(jax.value_and_grad(jloop, argnums=(0, 1, 2)))
        jua = [jnp.asarray(a) for a in ua]
        f = _first(lambda: _block(juvg(*jua)))
        rows.append(
            (
                f"RNN unrolled {unrolled_steps} steps, JAX jit",
                f,
                _median(lambda: _block(juvg(*jua)), 10),
            )
        )

    # --- per-example gradients: vmap(grad) of the seed MLP's loss, batch 64 --------------------
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 1000), dtype=np.float32)
    y = rng.standard_normal((64, 10), dtype=np.float32)
    w1 = rng.standard_normal((1000, 100), dtype=np.float32)
    w2 = rng.standard_normal((100, 10), dtype=np.float32)

    def loss(x, y, w1, w2):
        return ((x @ w1).clamp(min=0) @ w2 - y).pow(2).sum()

    pe = graphc.vmap(graphc.grad(loss, argnums=(2, 3)), in_axes=(0, 0, None, None))
    f = _first(lambda: pe(x, y, w1, w2))
    rows.append(
        ("per-example grads (64), graphc vmap(grad)", f, _median(lambda: pe(x, y, w1, w2), 20))
    )
    import eager

    tw1, tw2 = eager.tensor(w1, requires_grad=True), eager.tensor(w2, requires_grad=True)

    def eager_loop():
        out = []
        for i in range(64):
            tw1.grad = tw2.grad = None
            loss(eager.tensor(x[i]), eager.tensor(y[i]), tw1, tw2).backward()
            out.append((tw1.grad, tw2.grad))
        return out

    rows.append(("per-example grads (64), eager loop", (0.0, 0.0), _median(eager_loop, 5)))
    if jax is not None:

        def jl(x, y, w1, w2):
            return ((jnp.maximum(x @ w1, 0) @ w2 - y) ** 2).sum()

        jpe = jax.jit(jax.vmap(jax.grad(jl, argnums=(2, 3)), in_axes=(0, 0, None, None)))
        jx = [jnp.asarray(a) for a in (x, y, w1, w2)]
        f = _first(lambda: _block(jpe(*jx)))
        rows.append(
            (
                "per-example grads (64), JAX jit(vmap(grad))",
                f,
                _median(lambda: _block(jpe(*jx)), 20),
            )
        )
        a, b = jpe(*jx), pe(x, y, w1, w2)
        assert np.allclose(np.asarray(a[0]), b[0], rtol=1e-3, atol=1e-3)
    return rows


def format_rows(rows: list) -> str:
    lines = [f"{'workload':<48} {'first call':>12} {'(cpu)':>9} {'warm median':>12}"]
    for name, (w, c), t in rows:
        first = f"{w * 1e3:9.1f} ms" if w else "          -"
        cpu = f"{c * 1e3:7.0f} ms" if c else "        -"
        lines.append(f"{name:<48} {first:>12} {cpu:>9} {t * 1e3:9.3f} ms")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    steps = int(argv[0]) if argv else RNN_STEPS
    print(format_rows(run(steps)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
