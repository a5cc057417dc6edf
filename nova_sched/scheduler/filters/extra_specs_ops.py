"""nova's operator language for flavor extra specs and aggregate metadata.

``match(value, req)`` says whether a host's ``value`` satisfies a
requirement string such as ``">= 4"``, ``"s== kvm"``, ``"<in> avx"`` or
``"<or> kvm <or> qemu"``. The first word of ``req`` picks the operator and
the second is its operand:

=========  ============================================================
``=``      numeric, at least (``= 4`` passes 4, 5, 6.5...)
``==``     numeric equal          ``!=``  numeric not equal
``>=``     numeric at least       ``<=``  numeric at most
``s==``    string equal           ``s!=`` string not equal
``s<``     string less            ``s<=`` string less or equal
``s>``     string greater         ``s>=`` string greater or equal
``<in>``   the operand is a substring of the value
``<all-in>`` every following word is a substring of the value
``<or>``   ``<or> a <or> b ...``: the value equals one of the words
=========  ============================================================

A requirement whose first word is none of these is compared with the whole
value as a plain string (``"kvm"`` matches only ``"kvm"``). An operator
without an operand matches nothing; so does a numeric operator on a value
or operand that is not a number (nova raises ValueError there; a host that
cannot be compared does not qualify). Nothing is evaluated as code.
"""

from __future__ import annotations

import operator

import numpy as np


def _numeric(compare):
    def check(value: str, operand: str) -> bool:
        try:
            return compare(float(value), float(operand))
        except ValueError:
            return False

    return check


_OPERATORS = {
    "=": _numeric(operator.ge),
    "==": _numeric(operator.eq),
    "!=": _numeric(operator.ne),
    ">=": _numeric(operator.ge),
    "<=": _numeric(operator.le),
    "s==": operator.eq,
    "s!=": operator.ne,
    "s<": operator.lt,
    "s<=": operator.le,
    "s>": operator.gt,
    "s>=": operator.ge,
    "<in>": lambda value, operand: operand in value,
}

#: Every operator word the language knows, for callers that validate specs.
OPERATORS = frozenset(_OPERATORS) | {"<or>", "<all-in>"}


def matcher(req):
    """``req`` compiled once: a function of the value, ``match(value, req)``.

    Filters that test one requirement against many hosts use this to parse
    the requirement once.
    """
    if not isinstance(req, str):
        req = str(req)
    words = req.split()
    op = words[0] if words else None
    if op not in _OPERATORS and op not in ("<or>", "<all-in>"):
        return lambda value: value == req
    operands = words[1:]
    if op == "<or>":
        # nova reads "<or> v1 <or> v2 <or> v3": the candidates sit at every
        # other word, whatever separates them; a trailing "<or>" is ignored.
        candidates = frozenset(operands[::2])
        return lambda value: value is not None and value in candidates
    if not operands:
        return lambda value: False
    if op == "<all-in>":
        return lambda value: value is not None and all(w in value for w in operands)
    compare, operand = _OPERATORS[op], operands[0]
    return lambda value: value is not None and compare(value, operand)


def match(value, req) -> bool:
    """True when ``value`` satisfies the requirement string ``req``.

    ``value`` is normally a string; other values are compared as ``str()``
    of themselves, and None matches no operator.
    """
    if value is not None and not isinstance(value, str):
        value = str(value)
    return matcher(req)(value)


# The numeric operators, over arrays of numbers.
_NUMERIC_ARRAYS = {"=": np.greater_equal, "==": np.equal, "!=": np.not_equal,
                   ">=": np.greater_equal, "<=": np.less_equal}


def numeric_matcher(req):
    """For a numeric requirement, ``matcher(req)`` over an array of numbers.

    Returns a function of an array of ints or floats giving, for each,
    what ``matcher(req)`` gives for its ``str()``; None when ``req`` is not
    a numeric requirement (string operators, ``<in>``, plain equality...).
    """
    words = str(req).split()
    if len(words) < 2 or words[0] not in _NUMERIC_ARRAYS:
        return None
    try:
        operand = float(words[1])
    except ValueError:
        return lambda values: np.zeros(len(values), dtype=bool)
    compare = _NUMERIC_ARRAYS[words[0]]
    return lambda values: compare(np.asarray(values, dtype=np.float64), operand)
