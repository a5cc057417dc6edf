"""The documented custom filter and weigher (doc/filters-and-weighers.md), loaded by dotted path.

The code and the configuration are taken from that document itself, so the
documented example keeps working as the package changes.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from nova_sched.scheduler.filters import HostFilterHandler
from nova_sched.scheduler.filters.ram_filter import RamFilter
from nova_sched.scheduler.weights import HostWeightHandler
from nova_sched.scheduler.weights.ram import RAMWeigher
from tests.unit.scheduler import fakes

README = Path(__file__).resolve().parents[3] / "doc" / "filters-and-weighers.md"


def _block(language: str, after: str) -> str:
    text = README.read_text()
    start = text.index(after)
    found = re.search(rf"```{language}\n(.*?)```", text[start:], re.S)
    assert found, f"no {language} block after {after!r} in the README"
    return found.group(1)


def _options(ini: str) -> dict[str, list[str]]:
    options: dict[str, list[str]] = {}
    for line in ini.splitlines():
        if "=" in line:
            key, value = (part.strip() for part in line.split("=", 1))
            options.setdefault(key, []).append(value)
    return options


@pytest.fixture
def documented(tmp_path, monkeypatch):
    package = tmp_path / "mycloud"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "scheduling.py").write_text(
        _block("python", "### Writing your own filter or weigher"))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield _options(_block("ini", "### Writing your own filter or weigher"))
    for name in [m for m in sys.modules if m == "mycloud" or m.startswith("mycloud.")]:
        del sys.modules[name]


def test_the_readme_filter_and_weigher_load_by_dotted_path_and_decide(documented):
    filters = HostFilterHandler(documented["available_filters"]).get_filters(
        [n.strip() for n in documented["enabled_filters"][0].split(",")])
    weighers = HostWeightHandler().get_weighers(
        [n.strip() for n in documented["weight_classes"][0].split(",")])
    assert [f.name() for f in filters] == ["ComputeFilter", "RamFilter", "EvenHostsFilter"]
    assert [w.name() for w in weighers] == ["RAMWeigher", "FewestInstancesWeigher"]

    table = fakes.make_table([
        dict(host=f"host{i}", memory_mb=4096, vcpus=4, local_gb=10,
             num_instances=n) for i, n in enumerate([0, 5, 3, 0, 1])])
    spec = fakes.make_spec()
    result = HostFilterHandler.run(filters, fakes.cycle(table, spec), table.active_rows())
    assert sorted(table.states[r].host for r in result.rows) == ["host0", "host2", "host4"]
    assert result.removed_counts() == [("EvenHostsFilter", 2)]

    weighed = HostWeightHandler.weigh(weighers, fakes.cycle(table, spec), result.rows)
    # Equal free RAM: the fewest instances wins.
    assert [table.states[r].host for r in weighed.rows] == ["host0", "host4", "host2"]
    assert weighed.contributions["FewestInstancesWeigher"].tolist() == pytest.approx(
        [1.0, 2 / 3, 0.0])


class NoOddRamFilter(RamFilter):
    """A subclass overriding nova's method: it must be the one asked."""

    def host_passes(self, host_state, spec):
        return super().host_passes(host_state, spec) and host_state.host != "big-odd"


class RamOnlyPastAGigabyteWeigher(RAMWeigher):
    """A subclass overriding nova's method: it must be the one asked."""

    def _weigh_object(self, host_state, spec):
        return max(0, host_state.free_ram_mb - 1024)


def test_subclasses_overriding_novas_methods_of_built_ins_are_honoured():
    table = fakes.make_table([dict(host="big-odd", memory_mb=65536),
                              dict(host="small", memory_mb=2048),
                              dict(host="tiny", memory_mb=512)])
    spec = fakes.make_spec(memory_mb=1024)
    assert fakes.passes(NoOddRamFilter(), table, spec) == [("small", "small")]
    assert fakes.passes(RamFilter(), table, spec) == [("big-odd", "big-odd"),
                                                      ("small", "small")]
    raw = fakes.weigh(RamOnlyPastAGigabyteWeigher(), table, spec)
    assert raw.tolist() == [65536 - 1024, 1024, 0]


def test_a_plugin_overriding_neither_method_is_refused_clearly():
    from nova_sched.scheduler.filters import BaseHostFilter

    class Empty(BaseHostFilter):
        pass

    table = fakes.make_table([dict(host="h1")])
    with pytest.raises(NotImplementedError, match="Empty overrides neither"):
        Empty().host_passes(fakes.state(table, "h1"), fakes.make_spec())


def test_a_subclass_calling_its_parents_host_passes_sees_the_decision():
    from nova_sched.scheduler.filters.affinity_filter import ServerGroupAntiAffinityFilter

    asked = []

    class CountingAntiAffinity(ServerGroupAntiAffinityFilter):
        def host_passes(self, host_state, spec):
            asked.append(host_state.host)
            return super().host_passes(host_state, spec)

    table = fakes.make_table([dict(host="a"), dict(host="b"), dict(host="c")])
    group = fakes.group("anti-affinity", {"b": 1})
    kept = fakes.passes(CountingAntiAffinity(), table, fakes.make_spec(), group)
    assert kept == [("a", "a"), ("c", "c")]
    assert asked == ["a", "b", "c"]
