"""Unit-test fixtures shared by every unit test."""

from __future__ import annotations

import pathlib
import sys

import pytest

# ``from tests.unit.scheduler import fakes`` works under plain ``pytest``
# as well as ``python -m pytest`` (which puts the working directory first).
_ROOT = str(pathlib.Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from nova_sched.conf import CONF  # noqa: E402
from tests.db_backends import scheduler_database  # noqa: E402


@pytest.fixture(autouse=True)
def _reset_conf():
    """Undo every CONF.set_override a test made, whatever its outcome."""
    yield
    CONF.reset()


@pytest.fixture
def db(tmp_path):
    """A fresh, migrated SQLite file database as the process's database."""
    with scheduler_database(f"sqlite:///{tmp_path}/nova_sched.sqlite") as engine:
        yield engine
