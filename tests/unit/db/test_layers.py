"""db/ stands below the scheduler: it imports nothing from it, and every
statement on the allocations table is in db/allocations.py."""

from __future__ import annotations

import ast
import pathlib

import nova_sched

PACKAGE = pathlib.Path(nova_sched.__file__).resolve().parent


def _imported_modules(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_db_imports_nothing_from_the_scheduler():
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(
            name for name in _imported_modules(path)
            if name.startswith("nova_sched.scheduler"))
        for path in (PACKAGE / "db").rglob("*.py")
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def _uses_allocation_model(path: pathlib.Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr == "Allocation":
            return True
        if isinstance(node, ast.Name) and node.id == "Allocation":
            return True
        if isinstance(node, ast.alias) and node.name == "Allocation":
            return True
    return False


def test_allocation_sql_lives_in_db_allocations_only():
    allowed = {PACKAGE / "db" / "allocations.py", PACKAGE / "db" / "models.py"}
    migrations = PACKAGE / "db" / "migrations"
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path not in allowed and migrations not in path.parents
        and _uses_allocation_model(path)
    ]
    assert offenders == []
