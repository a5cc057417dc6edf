"""Two of nova's cells behind one nova-sched: a move kept in its cell, the
alternates of a build, and one cell's database unreachable while the other
is served (nova's databases in SQLite with nova's columns, an in-memory
Placement)."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler.wire import request
from tests.unit.scheduler.conftest import boot_request
from tests.unit.scheduler.sources.test_nova_cells import cloud  # noqa: F401 (fixture)


@pytest.fixture
def two_cells(cloud):  # noqa: F811 (the fixture imported above)
    """``cloud`` with a second cell, ``cloud.cell2``; c1-a, c1-b in the first
    cell, c2-a, c2-b in the second, all read."""
    cloud.cell2 = cloud.tables.add_cell("cell2")
    for host in ("c1-a", "c1-b"):
        cloud.add_compute(host)
    for host in ("c2-a", "c2-b"):
        node = cloud.tables.add_compute(cloud.cell2, host)
        cloud.placement.add_provider(node, 8, 16384, 100)
    cloud.host_manager.full_resync()
    return cloud


def cut_cell(cloud, cell: str, monkeypatch) -> None:
    """``cell``'s database refuses every read (``monkeypatch.undo()`` ends it)."""
    def _refused(*_args, **_kwargs):
        raise sa.exc.OperationalError("SELECT", {}, Exception("connection refused"))
    monkeypatch.setattr(cloud.source.databases.cells[cell], "services", _refused)


def _select(cloud, destination: dict | None = None, alternates: int = 0, **flavor):
    fprops = {} if destination is None else {"requested_destination": destination}
    spec = request.parse(boot_request(**flavor), fprops)
    [outcome] = list(cloud.cycle.schedule(None, spec, alternates=alternates))
    if outcome.error is not None:
        raise outcome.error
    return outcome.selections


def _cells(cloud) -> dict[str, str]:
    table = cloud.host_manager.table
    return {table.states[r].host: table.states[r].cell_uuid
            for r in table.active_rows()}


def test_a_move_kept_in_its_cell_never_leaves_it(two_cells):
    cloud = two_cells
    cells = _cells(cloud)
    for _ in range(6):
        [chosen] = _select(cloud, {"host": None, "node": None, "cell": cloud.cell2})
        assert cells[chosen.host] == cloud.cell2
        assert chosen.cell_uuid == cloud.cell2


def test_no_room_in_the_cell_is_no_valid_host_naming_the_cell_even_with_room_elsewhere(
        two_cells):
    cloud = two_cells
    # Fill the second cell's nodes (8 vCPU each).
    for _ in range(2):
        _select(cloud, {"host": None, "node": None, "cell": cloud.cell2}, vcpus=8)
    with pytest.raises(exception.NoValidHost) as err:
        _select(cloud, {"host": None, "node": None, "cell": cloud.cell2}, vcpus=1)
    assert "requested_destination.cell removed 2" in err.value.reason
    # The first cell had room all along, and a request of any cell finds it.
    [chosen] = _select(cloud, vcpus=1)
    assert _cells(cloud)[chosen.host] == cloud.cell


def test_a_cell_no_node_was_read_from_has_no_candidates(two_cells):
    with pytest.raises(exception.NoValidHost) as err:
        _select(two_cells, {"host": None, "node": None,
                            "cell": "99999999-9999-9999-9999-999999999999"})
    assert "requested_destination.cell removed 4" in err.value.reason


def test_alternates_are_of_the_chosen_hosts_cell_only(two_cells):
    cloud = two_cells
    cells = _cells(cloud)
    seen = set()
    for _ in range(8):
        chosen, *others = _select(cloud, alternates=3)
        seen.add(cells[chosen.host])
        # Four candidates, two per cell: the choice's one cell-mate only.
        assert [cells[o.host] for o in others] == [cells[chosen.host]]
        assert all(o.cell_uuid == chosen.cell_uuid for o in others)
    assert seen == {cloud.cell, cloud.cell2}


def test_one_cell_unreachable_is_said_and_the_other_is_still_read(two_cells, monkeypatch):
    cloud = two_cells
    cut_cell(cloud, cloud.cell2, monkeypatch)
    cloud.poll()
    problem = cloud.source.problem()
    assert problem is not None and "cell2" in problem and cloud.cell2 in problem
    assert cloud.cell not in problem
    # The unread cell keeps what was last read of it; the other is read on.
    cloud.add_compute("c1-new")
    cloud.poll()
    assert set(_cells(cloud)) == {"c1-a", "c1-b", "c1-new", "c2-a", "c2-b"}
    # Its hosts are no candidates meanwhile: conductor could not create an
    # instance in its database (nova-scheduler skips such a cell too).
    for _ in range(4):
        [chosen] = _select(cloud)
        assert _cells(cloud)[chosen.host] == cloud.cell
    with pytest.raises(exception.NoValidHost) as err:
        _select(cloud, {"host": None, "node": None, "cell": cloud.cell2})
    assert "cell database unreachable removed 2" in err.value.reason
    monkeypatch.undo()
    cloud.poll()
    assert cloud.source.problem() is None
    [chosen] = _select(cloud, {"host": None, "node": None, "cell": cloud.cell2})
    assert _cells(cloud)[chosen.host] == cloud.cell2


def test_instances_of_an_unreachable_cell_are_not_taken_for_gone(two_cells, monkeypatch):
    cloud = two_cells
    cloud.tables.add_instance(cloud.cell2, "inst-in-cell2", "c2-a", "c2-a")
    # The option's minimum: an instance no cell lists is taken for gone
    # at the next reconciliation.
    CONF.set_override("resync_interval", 1.0, "nova_cells")
    cloud.poll()
    assert cloud.source.hosts_of(["inst-in-cell2"]) == {"inst-in-cell2": "c2-a"}
    cut_cell(cloud, cloud.cell2, monkeypatch)
    time.sleep(1.05)
    cloud.poll()
    assert cloud.source.hosts_of(["inst-in-cell2"]) == {"inst-in-cell2": "c2-a"}
    # Once the cell answers, the reconciliation runs and what it lists stays.
    monkeypatch.undo()
    cloud.tables.delete_instance(cloud.cell2, "inst-in-cell2")
    time.sleep(1.05)
    cloud.poll()
    assert cloud.source.hosts_of(["inst-in-cell2"]) == {}
