"""The loops-and-transforms comparison tool runs (JAX rows appear only where JAX is
importable; here the graphc and eager rows, whose results it checks against JAX's
when both exist)."""

from graphc.tools import bench_jax_loops


def test_rows_and_table():
    rows = bench_jax_loops.run(unrolled_steps=3)
    names = [r[0] for r in rows]
    assert "RNN scan 300 steps, graphc" in names
    assert "RNN unrolled 3 steps, graphc" in names
    assert "per-example grads (64), eager loop" in names
    assert all(t > 0 for _, _, t in rows)
    text = bench_jax_loops.format_rows(rows)
    assert text.splitlines()[0].startswith("workload") and len(text.splitlines()) == len(rows) + 1
