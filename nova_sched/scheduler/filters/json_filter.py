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

The query is evaluated over all candidate hosts at once, with the same
results as host by host: a variable naming a figure that claims change
(``$free_ram_mb``, ``$num_instances``, the allocation ratios...) is a
column, compared with NumPy; one naming what a node reported (``$host``,
``$stats.rack``, ``$cpu_info.vendor``...) is a kind the host table keeps
per node (``scheduler.cloud.host_kinds``), and commands over such values are
worked out once per distinct value (or combination of values), with
nova's own functions, whatever the number of hosts.
"""

from __future__ import annotations

import json
import logging
import operator
from typing import Any, Callable

import numpy as np

from nova_sched import exception
from nova_sched.scheduler import filters
from nova_sched.scheduler.cloud import host_kinds
from nova_sched.scheduler.cloud.host_state import attribute_kind

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
# Kind name prefix: a variable's value read from a node's report.
_VARIABLE = "json_filter.variable"


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return _MISSING


def _lookup(host_state, path: tuple[str, ...]) -> Any:
    """A variable's value for one host (nova's rules); _MISSING if it has none."""
    name = path[0]
    if not name or name.startswith("_"):
        return _MISSING
    value = getattr(host_state, name, None)
    if value is None or callable(value):
        return _MISSING
    if len(path) > 1 and isinstance(value, str) and value[:1] == "{":
        # An attribute's JSON text (cpu_info) is parsed once per report.
        value = host_state.derived(_PARSED + name,
                                   lambda hs: _parse(getattr(hs, name)))
    return _walk(value, path[1:])


def _walk(value: Any, keys: tuple[str, ...]) -> Any:
    """Down through dicts (and JSON texts of dicts) along ``keys``."""
    for key in keys:
        if isinstance(value, str) and value[:1] == "{":
            value = _parse(value)
        if not isinstance(value, dict):
            return _MISSING
        value = value.get(key)
        if value is None:
            return _MISSING
    return value


# -- the query as a tree ----------------------------------------------------------

class _Literal:
    def __init__(self, value):
        self.value = value


class _Variable:
    def __init__(self, path: tuple[str, ...]):
        self.path = path


class _Command:
    def __init__(self, op: str, args: list):
        self.op = op
        self.command = _COMMANDS[op]
        self.args = args


def _parse_arg(arg: Any, depth: int):
    if isinstance(arg, list):
        return _parse_query(arg, depth + 1)
    if isinstance(arg, str) and arg.startswith("$"):
        return _Variable(tuple(arg[1:].split(".")))
    return _Literal(arg)


def _parse_query(query: list, depth: int = 0):
    """A query (or sub-query) as a tree; InvalidQuery if it is malformed."""
    if depth > _MAX_DEPTH:
        raise InvalidQuery(f"nested deeper than {_MAX_DEPTH} levels")
    if not query:
        return _Literal(True)  # nova: an empty (sub-)query is true
    op = query[0]
    if not isinstance(op, str):
        raise InvalidQuery(
            f"a command must start with an operator name, got {json.dumps(op)}")
    if op not in _COMMANDS:
        raise InvalidQuery(
            f"unknown operator {op!r}; known operators: " + ", ".join(_COMMANDS))
    # nova drops null and empty-string arguments before the command sees them.
    return _Command(op, [_parse_arg(arg, depth) for arg in query[1:]
                         if arg is not None and arg != ""])


def _compile_text(text: str):
    """The query as a tree, or None when it passes every host."""
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
    return _parse_query(query)


# -- evaluating the tree over many hosts at once ------------------------------
#
# A node's value over the rows is one of:
#   _Const     the same for every row;
#   _Coded     per-row codes into a list of values: what a report gives
#              (kind codes the host table keeps), aggregates, and the
#              results computed from those, judged once per distinct code;
#   np.ndarray a per-row array of numbers or booleans: figures claims
#              change (free_ram_mb...) and the results computed from them.
# Report values may be missing (_MISSING) on some hosts and are then
# dropped from the arguments, as nova drops them host by host; figures are
# never missing.

class _Const:
    def __init__(self, value):
        self.value = value


class _Coded:
    def __init__(self, codes: np.ndarray, values: list):
        self.codes = codes
        self.values = values


_NUMBERS = (int, float, np.integer, np.floating, np.bool_)
_EXACT = 2 ** 53


def _number_like(value: Any) -> bool:
    """A scalar NumPy compares with an array of numbers as Python would."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _EXACT:
        return False
    return isinstance(value, _NUMBERS)


def _pair(op: Callable, left, right, length: int):
    """``op(left, right)`` per row, False where Python raises TypeError;
    at least one side is an array of numbers or booleans."""
    for scalar in (left, right):
        if not isinstance(scalar, np.ndarray) and not _number_like(scalar):
            if isinstance(scalar, (int, float)):  # a huge int: Python's rules
                return _each(op, left, right, length)
            # A number never equals text, a list, a dict...; ordering them
            # raises TypeError, which is false.
            return False
    return op(left, right)


def _each(op: Callable, left, right, length: int) -> np.ndarray:
    def at(value, i):
        return value[i].item() if isinstance(value, np.ndarray) else value

    def one(i):
        try:
            return bool(op(at(left, i), at(right, i)))
        except TypeError:
            return False

    return np.fromiter((one(i) for i in range(length)), dtype=bool, count=length)


def _truthy(value):
    if isinstance(value, np.ndarray):
        return value if value.dtype == bool else value != 0
    return bool(value)


_ORDERING = {"=": operator.eq, "<": operator.lt, ">": operator.gt,
             "<=": operator.le, ">=": operator.ge}


def _vector_command(op: str, args: list, length: int):
    """``_COMMANDS[op]`` over arguments some of which are per-row arrays."""
    if op in _ORDERING or op == "in":
        if len(args) < 2:
            return False
        first = args[0]
        if op == "in":
            result: Any = False
            for other in args[1:]:
                result = result | _pair(operator.eq, first, other, length)
            return result
        compare, result = _ORDERING[op], True
        for other in args[1:]:
            result = result & _pair(compare, first, other, length)
        return result
    if op == "not":  # any negation true (_truth of nova's list of results)
        result = False
        for arg in args:
            result = result | ~np.asarray(_truthy(arg))
        return result
    if op == "or":
        result = False
        for arg in args:
            result = result | _truthy(arg)
        return result
    result = True  # "and"
    for arg in args:
        result = result & _truthy(arg)
    return result


class _Evaluation:
    """The query's nodes over ``rows`` of one decision."""

    def __init__(self, cycle, rows: np.ndarray):
        self.cycle = cycle
        self.rows = rows
        self.length = len(rows)

    def truth(self, node) -> np.ndarray:
        value = self.value(node)
        if isinstance(value, _Const):
            return np.full(self.length, _truth(value.value), dtype=bool)
        if isinstance(value, _Coded):
            verdicts = np.array([_truth(v) for v in value.values], dtype=bool)
            return verdicts.take(value.codes)
        return np.broadcast_to(_truthy(value), (self.length,)).copy()

    def value(self, node):
        if isinstance(node, _Literal):
            return _Const(node.value)
        if isinstance(node, _Variable):
            return self._variable(node.path)
        return self._command(node)

    def _variable(self, path: tuple[str, ...]):
        cycle, rows, name = self.cycle, self.rows, path[0]
        what = attribute_kind(name)
        if what == host_kinds.ABSENT:
            return _Const(_MISSING)
        if what == host_kinds.FIGURE:
            # A number: present everywhere, and no dict to go further into.
            if len(path) > 1:
                return _Const(_MISSING)
            return host_kinds.figure_column(cycle, name, rows)
        if what == host_kinds.AGGREGATES:
            codes, values = host_kinds.aggregate_codes(cycle, name, rows)
            return _Coded(codes, [_walk(v, path[1:]) for v in values])
        if what == host_kinds.BY_HOST:
            codes, values = host_kinds.by_host_codes(
                cycle, rows, lambda state: _lookup(state, path))
            return _Coded(codes, values)
        kinds = cycle.table.kinds
        key = (_VARIABLE, path)
        codes = kinds.codes(key, lambda state: _lookup(state, path))
        return _Coded(cycle.table.pick(codes, rows), kinds.values(key))

    def _command(self, node: _Command):
        args = [self.value(arg) for arg in node.args]
        arrays = [a for a in args if isinstance(a, np.ndarray)]
        coded = [a for a in args if isinstance(a, _Coded)]
        if not arrays and not coded:
            return _Const(_collapse(node.command(
                [a.value for a in args if a.value is not _MISSING])))
        if not arrays and len(coded) == 1 and 4 * len(coded[0].values) <= self.length:
            # One report value: once per value of its kind, whichever rows
            # have it.
            (only,) = coded
            results = [bool(_collapse(node.command(
                [v for v in (only_value if a is only else a.value for a in args)
                 if v is not _MISSING]))) for only_value in only.values]
            return _Coded(only.codes, results)
        groups, first = _groups(coded, self.length)

        def scalars(position: int) -> list:
            return [a.value if isinstance(a, _Const)
                    else a.values[a.codes[position]] if isinstance(a, _Coded) else a
                    for a in args]

        if not arrays:
            # Report values only: once per distinct combination of them.
            results = [bool(_collapse(node.command(
                [v for v in scalars(int(p)) if v is not _MISSING]))) for p in first]
            return _Coded(np.asarray(results, dtype=np.int8)[groups], [False, True])
        # With figures: vector operations within each combination of report
        # values (usually one or two).
        if len(first) == 1:
            return self._vector(node.op, scalars(int(first[0])), slice(None))
        result = np.zeros(self.length, dtype=bool)
        order = np.argsort(groups, kind="stable")
        bounds = np.searchsorted(groups[order], np.arange(len(first) + 1))
        for group in range(len(first)):
            where = order[bounds[group]:bounds[group + 1]]
            values = [v[where] if isinstance(v, np.ndarray) else v
                      for v in scalars(int(first[group]))]
            result[where] = self._vector(node.op, values, where)
        return result

    def _vector(self, op: str, values: list, where) -> np.ndarray:
        length = self.length if isinstance(where, slice) else len(where)
        present = [v for v in values if v is not _MISSING]
        result = _vector_command(op, present, length)
        return np.broadcast_to(result, (length,)).copy()


def _groups(coded: list, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by the combination of the coded arguments' codes:
    each row's group number and each group's first row."""
    if not coded:
        return np.zeros(length, dtype=np.int64), np.zeros(1, dtype=np.int64)
    combined = np.zeros(length, dtype=np.int64)
    span = 1
    for arg in coded:
        combined = combined * len(arg.values) + arg.codes
        span *= len(arg.values)
        if span > 1 << 40:  # keep the combined codes small
            _, combined = np.unique(combined, return_inverse=True)
            combined = combined.reshape(-1)
            span = int(combined.max()) + 1
    if span <= 4 * length + 64:
        # Small codes: lookup tables, linear in the rows (np.unique sorts).
        first_at = np.full(span, length, dtype=np.int64)
        first_at[combined[::-1]] = np.arange(length - 1, -1, -1)
        present = np.flatnonzero(first_at < length)
        number = np.zeros(span, dtype=np.int64)
        number[present] = np.arange(len(present))
        return number[combined], first_at[present]
    _, first, groups = np.unique(combined, return_index=True, return_inverse=True)
    return groups.reshape(-1), first


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
        query = cycle.prepared(self)
        if query is None:
            return filters.everyone(rows)
        return _Evaluation(cycle, np.asarray(rows)).truth(query)
