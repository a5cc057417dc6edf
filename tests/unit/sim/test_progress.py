"""The demo's progress bars: on a terminal only, finished before the summary.

A person watching ``nova-sched-sim`` in a terminal sees how far the hosts
and the boots have got, how fast, and how many instances were placed or
failed; a pipe or a log file gets the summary alone.
"""

from __future__ import annotations

import io
import re
import sys

import pytest

from nova_sched import sim
from nova_sched.cmd import sim as sim_cmd
from nova_sched.db import api as db_api

HOSTS = 5
INSTANCES = 12


class _Terminal(io.StringIO):
    """An in-memory stream that says it is a terminal, as tqdm asks."""

    def isatty(self) -> bool:
        return True


class _Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


@pytest.fixture(autouse=True)
def _close_the_demo_database():
    yield
    db_api.get_engine().dispose()


def _frames(text: str, label: str) -> list[str]:
    """Every drawing of the bar named ``label``, oldest first."""
    return [f for f in re.split(r"[\r\n]", text) if f.startswith(f"{label}:")]


def _run_command(monkeypatch, stream: io.StringIO) -> str:
    # One stream for both, as on a terminal, so the order shows.
    monkeypatch.setattr(sys, "stdout", stream)
    monkeypatch.setattr(sys, "stderr", stream)
    code = sim_cmd.main(["--hosts", str(HOSTS), "--instances", str(INSTANCES)])
    assert code == 0, stream.getvalue()
    return stream.getvalue()


def test_a_terminal_sees_counts_rate_and_outcomes_ending_at_the_total(monkeypatch):
    out = _run_command(monkeypatch, _Terminal())

    hosts = _frames(out, "hosts")
    assert hosts, out
    assert f"{HOSTS}/{HOSTS}" in hosts[-1]
    assert re.search(r"[\d.]+host/s", hosts[-1]), hosts[-1]

    booting = _frames(out, "booting")
    assert booting, out
    last = booting[-1]
    assert "100%" in last and f"{INSTANCES}/{INSTANCES}" in last, last
    assert re.search(r"[\d.]+instance/s", last), last
    outcomes = re.search(r"placed=(\d+), failed=(\d+)", last)
    assert outcomes, last
    assert int(outcomes[1]) + int(outcomes[2]) == INSTANCES


def test_the_bars_are_finished_before_the_summary_starts(monkeypatch):
    out = _run_command(monkeypatch, _Terminal())

    before, summary = out.split("nova-sched-sim:", 1)
    # The summary begins on a fresh line, below the finished bars ...
    assert before.endswith("\n"), before[-200:]
    assert f"{INSTANCES}/{INSTANCES}" in before.rstrip("\n").rsplit("\r", 1)[-1]
    # ... and no late redraw lands inside it.
    assert "\r" not in summary and "%|" not in summary, summary


def test_a_pipe_gets_the_summary_alone(monkeypatch):
    out = _run_command(monkeypatch, _Pipe())

    # Log lines (a slow machine's warnings) may come first; no bar does.
    assert "\nnova-sched-sim:" in "\n" + out, out[:300]
    assert "\r" not in out
    assert not _frames(out, "hosts") and not _frames(out, "booting")


@pytest.mark.parametrize("stream, show, drawn", [
    (_Terminal, False, False),
    (_Pipe, True, True),
])
def test_show_progress_overrides_the_terminal_check(monkeypatch, stream, show, drawn):
    err = stream()
    monkeypatch.setattr(sys, "stderr", err)

    sim.run(HOSTS, INSTANCES, seed=0, show_progress=show)

    assert bool(_frames(err.getvalue(), "booting")) is drawn, err.getvalue()
