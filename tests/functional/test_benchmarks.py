"""Every benchmark under bench/ runs, in its short smoke form.

The benchmarks print figures; what is checked here is what they check
themselves: the column-wise decisions choose what the per-host reference
chooses, nothing is lost end to end, a restarted daemon answers, every
request handed to the request path in process is placed. Timings
are printed, never asserted.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import cloudlib

pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _smoke(script: str, *args: str, timeout: float = 300) -> str:
    done = subprocess.run([sys.executable, str(BENCH / script), "--smoke", *args],
                          capture_output=True, text=True, timeout=timeout,
                          env=cloudlib.subprocess_env(), stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (
        f"{script} --smoke exited {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done.stdout


def test_decision_bench_smoke():
    out = _smoke("decision_bench.py")
    assert "chose the same hosts in the same order as the per-host reference" in out


def test_startup_bench_smoke(rabbitmq):
    out = _smoke("startup_bench.py")
    assert "first answer after" in out


def test_e2e_bench_smoke(rabbitmq):
    out = _smoke("e2e_bench.py")
    assert "LOST (neither arrived nor ERROR)" in out


def test_request_cost_smoke(rabbitmq):
    out = _smoke("request_cost.py")
    assert "50 requests x 1 rounds after 20 warm-up" in out
    assert "70 instances placed" in out
