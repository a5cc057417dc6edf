"""JsonFilter: hosts chosen by a query in nova's small JSON language.

The query comes from the scheduler hint ``query``, a JSON text (or the list
it parses to), for example::

    ["and", [">=", "$free_ram_mb", 1024], ["in", "$stats.rack", "r1", "r2"]]

A list is a command: its first item an operator, the rest its arguments.
Operators, as in nova: ``=``, ``<``, ``>``, ``<=``, ``>=`` (the first
argument compared with every other one), ``in`` (the first argument equals
one of the others), ``not`` (each argument negated: a list of results),
``or``, ``and``. A string argument ``$name.key...`` is a variable: a public
attribute of the host state, then keys down through dicts (``$stats.foo``);
other strings are literals.

nova's rules that queries written for nova rely on are kept:

* no query, or an empty one (``[]``, ``{}``, ``""``, ``null``), passes every
  host;
* a variable the host does not have (unknown attribute, missing key) and an
  empty string are dropped from the arguments, so ``["=", "$foo", 1, 1]``
  compares ``1`` with ``1`` and ``["<", "$foo", 5]`` is false (a comparison
  needs two arguments);
* the query's result is true if it is a true value or, for ``not``'s list
  of results, if any of them is true.

Deliberate differences, where nova fails inside the scheduler or answers
something nobody can mean:

* a malformed query (bad JSON, not a list, an unknown operator such as
  ``!=``, an operator that is not a string) fails the request with
  InvalidRequestSpec naming the problem, checked once per decision, before
  any host is asked; nova raises ``KeyError``/``ValueError`` inside the daemon;
* a comparison of values that cannot be ordered (``["<", "$host", 5]``) is
  false for that host rather than a ``TypeError``;
* a sub-query's result used as an argument counts with the same any-rule as
  the top level, so ``["and", ["not", ["=", "$host", "h1"]], ...]`` really
  excludes ``h1`` (nova treats ``not``'s non-empty list as true there);
* a variable path may continue into a JSON text attribute (``$cpu_info.vendor``)
  and never reaches private attributes or methods of the host state.
"""

from __future__ import annotations

import json
import logging
import operator
from typing import Any, Callable

import numpy as np

from nova_sched import exception
from nova_sched.scheduler import filters

LOG = logging.getLogger(__name__)

_MAX_DEPTH = 64
_MISSING = object()  # a variable the host does not have: dropped, as in nova


def _compare(op: Callable[[Any, Any], bool]):
    def command(args: list) -> bool:
        # The first term against every other one; one term alone is false.
        if len(args) < 2:
            return False
        first = args[0]
        try:
            return all(op(first, other) for other in args[1:])
        except TypeError:
            return False

    return command


def _in(args: list) -> bool:
    return len(args) >= 2 and args[0] in args[1:]


def _truth(value: Any) -> bool:
    # ``not``'s list of results is true when any of its items is.
    if isinstance(value, _Results):
        return any(value)
    return bool(value)


def _collapse(value: Any) -> Any:
    """A sub-query's result as an argument: ``not``'s list becomes a bool."""
    return any(value) if isinstance(value, _Results) else value


class _Results(list):
    """The list of results ``not`` returns (nova's), told apart from data."""


def _not(args: list) -> _Results:
    return _Results(not arg for arg in args)


def _or(args: list) -> bool:
    return any(args)


def _and(args: list) -> bool:
    return all(args)


_COMMANDS: dict[str, Callable[[list], Any]] = {
    "=": _compare(operator.eq),
    "<": _compare(operator.lt),
    ">": _compare(operator.gt),
    "in": _in,
    "<=": _compare(operator.le),
    ">=": _compare(operator.ge),
    "not": _not,
    "or": _or,
    "and": _and,
}


class InvalidQuery(ValueError):
    """What is wrong with a query (becomes InvalidRequestSpec)."""


# host_state.derived name prefix: an attribute's JSON text, parsed.
_PARSED = "json_filter.parsed_json:"


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return _MISSING


def _lookup(host_state, path: tuple[str, ...]) -> Any:
    name = path[0]
    if not name or name.startswith("_"):
        return _MISSING
    value = getattr(host_state, name, None)
    if value is None or callable(value):
        return _MISSING
    for depth, key in enumerate(path[1:]):
        if isinstance(value, str) and value[:1] == "{":
            # An attribute's JSON text (cpu_info) is parsed once per report.
            value = (host_state.derived(_PARSED + name,
                                        lambda hs: _parse(getattr(hs, name)))
                     if depth == 0 else _parse(value))
            if value is _MISSING:
                return _MISSING
        if not isinstance(value, dict):
            return _MISSING
        value = value.get(key)
        if value is None:
            return _MISSING
    return value


def _compile_arg(arg: Any, depth: int) -> Callable[[Any], Any] | Any:
    """A function of the host state for variables and sub-queries, else the
    literal itself (None and "" are dropped by the caller, as in nova)."""
    if isinstance(arg, list):
        sub = _compile(arg, depth + 1)
        return lambda host_state: _collapse(sub(host_state))
    if isinstance(arg, str) and arg.startswith("$"):
        path = tuple(arg[1:].split("."))
        return lambda host_state: _lookup(host_state, path)
    return arg


def _compile(query: list, depth: int = 0) -> Callable[[Any], Any]:
    if depth > _MAX_DEPTH:
        raise InvalidQuery(f"nested deeper than {_MAX_DEPTH} levels")
    if not query:
        return lambda host_state: True  # nova: an empty (sub-)query is true
    op = query[0]
    if not isinstance(op, str):
        raise InvalidQuery(
            f"a command must start with an operator name, got {json.dumps(op)}")
    command = _COMMANDS.get(op)
    if command is None:
        raise InvalidQuery(
            f"unknown operator {op!r}; known operators: " + ", ".join(_COMMANDS))
    literals: list = []
    dynamic: list[tuple[int, Callable]] = []
    for arg in query[1:]:
        if arg is None or arg == "":
            continue
        compiled = _compile_arg(arg, depth)
        if callable(compiled):
            dynamic.append((len(literals), compiled))
            literals.append(None)
        else:
            literals.append(compiled)
    if not dynamic:
        constant = command(literals)
        return lambda host_state: constant

    def evaluate(host_state):
        args = list(literals)
        for position, fn in dynamic:
            args[position] = fn(host_state)
        return command([a for a in args if a is not _MISSING])

    return evaluate


def _compile_text(text: str) -> Callable[[Any], bool] | None:
    """The query's host predicate, or None when it passes every host."""
    try:
        query = json.loads(text)
    except RecursionError:
        raise InvalidQuery(f"nested deeper than {_MAX_DEPTH} levels") from None
    except ValueError as err:
        raise InvalidQuery(f"not valid JSON ({err}): {_shorten(text)}") from None
    if not query:
        return None
    if not isinstance(query, list):
        raise InvalidQuery(
            "must be a JSON list such as [\">=\", \"$free_ram_mb\", 1024], got "
            f"{_shorten(text)}")
    evaluate = _compile(query)
    return lambda host_state: _truth(evaluate(host_state))


def _shorten(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def query_text(hint: Any) -> str | None:
    """The query hint as JSON text; None when there is none.

    nova's API wraps each hint in a list; a one-item list of text is unwrapped.
    """
    if (isinstance(hint, list) and len(hint) == 1 and isinstance(hint[0], str)
            and hint[0] not in _COMMANDS):
        hint = hint[0]
    if not hint:
        return None
    if isinstance(hint, str):
        return hint
    if isinstance(hint, (list, dict)):
        try:
            return json.dumps(hint, sort_keys=True)
        except (TypeError, ValueError, RecursionError):
            raise InvalidQuery("cannot be serialised as JSON") from None
    raise InvalidQuery(f"must be JSON text or a list, got {type(hint).__name__}")


class JsonFilter(filters.BaseHostFilter):
    """Hosts for which the request's ``query`` hint holds."""

    def prepare(self, cycle):
        """The compiled query (None: every host passes), checked before any
        host is asked."""
        spec = cycle.spec
        try:
            text = query_text(spec.scheduler_hints.get("query"))
            return _compile_text(text) if text is not None else None
        except InvalidQuery as err:
            raise exception.InvalidRequestSpec(
                f"Invalid JsonFilter query: {err}",
                instance_uuids=list(spec.instance_uuids)) from None

    def filter_all(self, cycle, rows):
        predicate = cycle.prepared(self)
        if predicate is None:
            return np.ones(len(rows), dtype=bool)
        states = cycle.table.states
        return np.fromiter((predicate(states[r]) for r in rows), dtype=bool,
                           count=len(rows))
