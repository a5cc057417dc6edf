"""extra_specs_ops.match: nova's operator language, case by case."""

from __future__ import annotations

import pytest

from nova_sched.scheduler.filters import extra_specs_ops

FEATURES = str(["aes", "mmx", "aux"])


@pytest.mark.parametrize(
    "value, req, matches",
    [
        # No operator: the whole requirement compared as a string.
        ("1", "1", True),
        ("", "1", False),
        ("3", "1", False),
        ("222", "2", False),
        ("kvm", "kvm", True),
        ("kvm", "KVM", False),
        ("4", "> 2", False),  # ">" is not an operator: plain comparison
        ("", "", True),
        # "=" is numeric "at least".
        ("123", "= 123", True),
        ("124", "= 123", True),
        ("34", "= 234", False),
        ("34", "=", False),
        ("123.5", "= 123", True),
        ("1e3", "= 999", True),
        # Numeric comparisons.
        ("123", "== 123", True),
        ("123.0", "== 123", True),
        ("124", "== 123", False),
        ("124", "!= 123", True),
        ("123", "!= 123.0", False),
        ("3", ">= 1", True),
        ("2", ">= 3", False),
        ("2", "<= 10", True),  # numeric, although "2" > "10" as strings
        ("3", "<= 2", False),
        # String comparisons.
        ("123", "s== 123", True),
        ("1234", "s== 123", False),
        ("1234", "s!= 123", True),
        ("123", "s!= 123", False),
        ("1000", "s>= 234", False),
        ("234", "s>= 234", True),
        ("1234", "s<= 1000", False),
        ("2", "s< 12", False),
        ("12", "s> 2", False),
        ("b", "s> a", True),
        ("a", "s< b", True),
        # Substrings.
        ("12311321", "<in> 11", True),
        ("12311321", "<in> 12311321", True),
        ("12311321", "<in> 12311321 <in>", True),
        ("12310321", "<in> 11", False),
        ("12310321", "<in> 11 <in>", False),
        ("abc", "<in>", False),
        (FEATURES, "<all-in> aes mmx", True),
        (FEATURES, "<all-in> mmx", True),
        (FEATURES, "<all-in>  txt", False),
        (FEATURES, "<all-in> txt 3dnow", False),
        (FEATURES, "<all-in> txt aes", False),
        (FEATURES, "<all-in>", False),
        # One of several.
        ("12", "<or> 11 <or> 12", True),
        ("12", "<or> 11 <or> 12 <or>", True),
        ("13", "<or> 11 <or> 12", False),
        ("13", "<or> 11 <or> 12 <or>", False),
        ("11", "<or> 11", True),
        ("1", "<or> 11", False),  # whole words, not substrings
        ("kvm", "<or>", False),  # nova raises IndexError here
        ("<or>", "<or> a <or> b", False),  # separators are not candidates
    ],
)
def test_match(value, req, matches):
    assert extra_specs_ops.match(value, req) is matches


@pytest.mark.parametrize(
    "req", ["= 1", "== 1", "!= 1", ">= 1", "<= 1", "s== a", "<in> a",
            "<all-in> a", "<or> a <or> b"]
)
def test_none_value_matches_no_operator(req):
    assert extra_specs_ops.match(None, req) is False


def test_none_value_against_plain_string():
    assert extra_specs_ops.match(None, "kvm") is False


@pytest.mark.parametrize("op", ["=", "==", "!=", ">=", "<="])
@pytest.mark.parametrize("value, operand", [("abc", "1"), ("1", "abc")])
def test_numeric_operator_on_non_numbers_does_not_match(op, value, operand):
    assert extra_specs_ops.match(value, f"{op} {operand}") is False


def test_non_string_requirement_is_compared_as_string():
    # nova's flavor extra specs are strings; a number typed in JSON is too.
    assert extra_specs_ops.match("0", 0) is True
    assert extra_specs_ops.match("1", 0) is False


def test_non_string_value_is_compared_as_string():
    assert extra_specs_ops.match(4, ">= 2") is True
    assert extra_specs_ops.match(2048, "s== 2048") is True


def test_nothing_is_evaluated():
    assert extra_specs_ops.match("1", "__import__('os').system('false')") is False
    assert extra_specs_ops.match("1", "= __import__('os')") is False


def test_operator_words():
    assert {"=", "<or>", "<all-in>", "s>="} <= extra_specs_ops.OPERATORS


def test_compiled_matcher_agrees_with_match():
    for req in ["= 4", "<or> a <or> b", "<all-in> x y", "plain", "s< m", "<in>"]:
        check = extra_specs_ops.matcher(req)
        for value in ["4", "5", "a", "b", "xy", "plain", "c", "", None]:
            assert check(value) == extra_specs_ops.match(value, req), (req, value)
