"""The names operators' configurations and plugins spell keep working.

Filters, weighers and drivers are loaded by dotted path from
configuration (``available_filters``, ``weight_classes``,
``[scheduler] driver``) and site plugins subclass the base classes: these
paths are the package's public API, whatever rooms its insides move to.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

from nova_sched.scheduler import filters, weights
from nova_sched.scheduler.decision import loadables

PUBLIC = [
    "nova_sched.scheduler.filters.BaseHostFilter",
    "nova_sched.scheduler.filters.all_filters",
    "nova_sched.scheduler.weights.BaseHostWeigher",
    "nova_sched.scheduler.weights.all_weighers",
    "nova_sched.scheduler.driver.Scheduler",
    "nova_sched.scheduler.filter_scheduler.FilterScheduler",
    "nova_sched.scheduler.chance.ChanceScheduler",
    "nova_sched.scheduler.claims.Claim",
    "nova_sched.scheduler.claims.DatabaseClaims",
    "nova_sched.scheduler.manager.SchedulerManager",
    "nova_sched.scheduler.rpcapi.SchedulerAPI",
]


@pytest.mark.parametrize("path", PUBLIC)
def test_public_dotted_path_imports(path):
    assert loadables.import_object(path) is not None


@pytest.mark.parametrize("package, base", [
    ("nova_sched.scheduler.filters", filters.BaseHostFilter),
    ("nova_sched.scheduler.weights", weights.BaseHostWeigher),
])
def test_every_builtin_plugin_loads_by_its_module_path(package, base):
    # "nova_sched.scheduler.filters.ram_filter.RamFilter" and the like, as
    # operators write them in available_filters / weight_classes.
    found = 0
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        module = importlib.import_module(f"{package}.{info.name}")
        for name, obj in vars(module).items():
            if isinstance(obj, type) and issubclass(obj, base) and obj.__module__ == module.__name__ \
                    and not name.startswith("_"):
                assert loadables.import_object(f"{module.__name__}.{name}") is obj
                found += 1
    assert found >= 10
