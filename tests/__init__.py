"""The test suite.  tests/ mirrors the packages: tests/eager/..., tests/graphc/<room>/...,
and tests/parity/ for the eager vs compiled vs interpreter differential checks.

Every test directory is a package (an ``__init__.py``), so pytest imports a test file by
its full name (``tests.graphc.backend.test_native``): two directories may hold files of
the same name, a test imports a helper by that name (``from tests.parity import
fuzzgen``), and pytest puts the repository root on ``sys.path``, never tests/ itself,
where tests/eager and tests/graphc would stand in for the real eager and graphc.
"""
