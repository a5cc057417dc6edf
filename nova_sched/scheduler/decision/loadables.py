"""Resolve filter and weigher classes by name or dotted path."""

from __future__ import annotations

import importlib
import inspect

from nova_sched import exception


def import_object(path: str):
    """The object a dotted path names; ConfigurationError when missing."""
    module_name, _, attr = path.rpartition(".")
    if not module_name:
        raise exception.ConfigurationError(f"{path!r} is not a dotted path")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise exception.ConfigurationError(f"cannot import {module_name}: {err}")
    try:
        return getattr(module, attr)
    except AttributeError:
        raise exception.ConfigurationError(f"{module_name} has no {attr}")


def classes_from_paths(paths: list[str], base: type) -> list[type]:
    """Expand dotted paths into subclasses of ``base``.

    A path may name a class or a function returning a list of classes (as
    nova's ``all_filters``), so that one entry can add a whole family.
    """
    found: list[type] = []
    for path in paths:
        obj = import_object(path)
        if inspect.isclass(obj):
            candidates = [obj]
        elif callable(obj):
            candidates = list(obj())
        else:
            raise exception.ConfigurationError(f"{path} is not a class or function")
        for cls in candidates:
            if not (inspect.isclass(cls) and issubclass(cls, base)):
                raise exception.ConfigurationError(
                    f"{path} yields {cls!r}, not a {base.__name__}"
                )
            if cls not in found:
                found.append(cls)
    return found


def overrides_first(cls: type, base: type, method: str, other: str) -> bool:
    """Whether ``cls`` (below ``base``) defines ``method`` nearer than ``other``.

    How a plugin says which of nova's per-host method or the column-wise one
    it is written with: the most derived definition wins.
    """
    for klass in cls.__mro__:
        if klass is base:
            return False
        if method in vars(klass):
            return True
        if other in vars(klass):
            return False
    return False


def subclasses_in_package(package: str, base: type) -> list[type]:
    """Every concrete subclass of ``base`` defined in the package's modules.

    Classes named ``Base...`` or ``_...`` are building blocks, not plugins.
    """
    import pkgutil

    pkg = importlib.import_module(package)
    found: list[type] = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{package}.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(cls, base)
                and cls.__module__ == module.__name__
                and not cls.__name__.startswith(("Base", "_"))
                and cls not in found
            ):
                found.append(cls)
    return found
