"""graphc bench's interleaved timing: a workload's rows are timed together, in rounds."""
from __future__ import annotations

import graphc.tools.bench as bench


def test_rows_are_timed_in_rounds_after_the_workload(monkeypatch):
    monkeypatch.setattr(bench, "WARMUP_SECONDS", 0.0)
    calls: list = []

    def workload(quick):
        rows = {
            "a": bench._median_time(lambda: calls.append("a"), quick, min_time=1e-4),
            "b": bench._median_time(lambda: calls.append("b"), quick, min_time=1e-4),
        }
        assert not calls  # nothing timed while the workload runs
        rows["first call"] = 0.5  # a plain number is kept as it is
        return {"id": "X", "times": rows}

    res = bench._run_workload(workload, quick=False)
    times = res["times"]
    assert set(times) == {"a", "b", "first call"} and times["first call"] == 0.5
    assert all(isinstance(times[k], float) and times[k] > 0 for k in ("a", "b"))
    # the two implementations alternate (each round starts with another one)
    runs = [calls[0]]
    for c in calls[1:]:
        if c != runs[-1]:
            runs.append(c)
    assert len(runs) >= bench.ROUNDS + 1
    assert bench._PENDING is None


def test_median_time_outside_a_run_times_at_once(monkeypatch):
    monkeypatch.setattr(bench, "WARMUP_SECONDS", 0.0)
    t = bench._median_time(lambda: None, quick=True, min_time=1e-4)
    assert isinstance(t, float) and t > 0
