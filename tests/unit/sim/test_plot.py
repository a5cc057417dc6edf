"""The demo's picture: placements per second, the PNG, the README's copy.

The quick start promises a picture of a run (placed and failed per second
beside per-host utilisation) and shows a committed one; these tests hold
the figures it is drawn from, the file ``--plot`` writes and the
committed file the README points at.
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from nova_sched.cmd import sim as sim_cmd
from nova_sched.db import api as db_api
from nova_sched.sim import report

ROOT = pathlib.Path(__file__).resolve().parents[3]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# -- placements_per_second ----------------------------------------------------

def test_each_outcome_counts_in_its_whole_second_since_the_start():
    start = 100.0
    counts = report.placements_per_second(
        placed_at=[100.0, 100.2, 100.99, 101.0, 103.5],
        failed_at=[101.7, 103.9, 104.1], start=start)

    assert counts == {"placed": [3, 1, 0, 1, 0],
                      "failed": [0, 1, 0, 1, 1]}


def test_the_counts_sum_to_the_totals():
    placed_at = [10.0 + i * 0.37 for i in range(200)]
    failed_at = [10.0 + i * 1.9 for i in range(17)]

    counts = report.placements_per_second(placed_at, failed_at, start=10.0)

    assert sum(counts["placed"]) == 200
    assert sum(counts["failed"]) == 17
    assert len(counts["placed"]) == len(counts["failed"])


def test_seconds_without_outcomes_are_zeros_not_gaps():
    counts = report.placements_per_second([0.5, 5.5], [], start=0.0)

    assert counts == {"placed": [1, 0, 0, 0, 0, 1], "failed": [0] * 6}


def test_failures_are_counted_apart_from_placements():
    counts = report.placements_per_second([], [2.1, 2.2, 2.3], start=0.0)

    assert counts == {"placed": [0, 0, 0], "failed": [0, 0, 3]}


def test_no_outcomes_no_seconds():
    assert report.placements_per_second([], [], start=5.0) == {
        "placed": [], "failed": []}


def test_an_outcome_timed_just_before_the_start_is_not_lost():
    counts = report.placements_per_second([99.999], [], start=100.0)

    assert counts == {"placed": [1], "failed": [0]}


# -- --plot end to end ----------------------------------------------------------

def test_small_demo_writes_a_readable_png(tmp_path, capsys):
    pytest.importorskip(
        "matplotlib",
        reason="--plot needs matplotlib (pip install '.[plot]'); not installed")
    from matplotlib import image as mpimg

    png = tmp_path / "cloud.png"
    try:
        code = sim_cmd.main(["--hosts", "20", "--instances", "40", "--seed", "3",
                             "--json", "--plot", str(png)])
    finally:
        db_api.get_engine().dispose()
    out = capsys.readouterr().out
    assert code == 0, out
    summary = json.loads(out)

    timeline = summary["placements_per_second"]
    assert sum(timeline["placed"]) == summary["placed"]
    assert sum(timeline["failed"]) == summary["failed"]
    assert summary["plot"] == str(png)

    data = png.read_bytes()
    assert data[:8] == PNG_MAGIC
    # A figure with three panels, not an empty canvas.
    assert len(data) > 20_000
    pixels = mpimg.imread(png)
    height, width = pixels.shape[:2]
    assert (width, height) == (1200, 800)
    assert pixels.std() > 0.05


# -- the README's quick start -----------------------------------------------------

def _quick_start() -> str:
    readme = (ROOT / "README.md").read_text()
    section = re.search(r"^## Quick start\n(.*?)^## ", readme, re.S | re.M)
    assert section, "README.md has no '## Quick start' section"
    return section.group(1)


def test_the_quick_start_picture_is_the_one_its_command_writes():
    text = _quick_start()
    command = re.search(r"nova-sched-sim [^\n`]*--plot (\S+)", text)
    assert command, "the quick start's command draws no picture"
    target = command.group(1)
    shown = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text)
    assert target in shown, (target, shown)

    png = ROOT / target
    assert png.is_file(), f"{target} is not in the repository"
    data = png.read_bytes()
    assert data[:8] == PNG_MAGIC
    # Small enough for the README to load quickly.
    assert len(data) < 300_000
