"""bench/decision_bench.py's check, on small fleets: column-wise decisions
choose the same hosts in the same order as nova's per-host way (each
filter's host_passes and each weigher's _weigh_object, host by host), with
the default configuration, the whole catalogue, and candidate sampling."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_BENCH = Path(__file__).resolve().parents[3] / "bench" / "decision_bench.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("decision_bench", _BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("catalogue", [False, True], ids=["default", "catalogue"])
@pytest.mark.parametrize("sample", [0, 40], ids=["all", "sampled"])
def test_decisions_agree_with_the_per_host_reference(bench, catalogue, sample, capsys):
    assert bench.run([250], seed=3, catalogue=catalogue, sample=sample, breakdown=False,
                     repeats=3, memory=False)
    out = capsys.readouterr().out
    assert "DIFFERS" not in out
    if sample:
        assert "40 weighed" in out
