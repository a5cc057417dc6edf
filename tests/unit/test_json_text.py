"""JSON text through orjson: the documents Python's json writes and reads."""

from __future__ import annotations

import datetime
import json
import math

import numpy as np

from nova_sched import json_text


def test_documents_are_jsons_own():
    when = datetime.datetime(2026, 12, 3, 9, 30)
    for value in ({"when": when, "on": datetime.date(2026, 12, 3)},
                  {1: "one", 2.5: "two and a half", None: "none"},
                  {"big": 2 ** 70, "text": 'say "hi" caf\u00e9 \\ \n'},
                  {"weight": np.float64(0.25), "set": {"a"}}):
        assert json.loads(json_text.dumps(value, str)) == json.loads(
            json.dumps(value, default=str))


def test_text_orjson_refuses_is_read_as_json_reads_it():
    read = json_text.loads(b'{"load": NaN, "big": 1180591620717411303424}')
    assert math.isnan(read["load"]) and read["big"] == 2 ** 70
    assert json_text.loads('{"a": [1, 2.5, null]}') == {"a": [1, 2.5, None]}


def test_quoted_text_reads_back_as_itself():
    text = 'a "quoted" caf\u00e9 \\ line\nnext'
    assert json.loads(json_text.quoted(text)) == text


def test_sorted_documents_and_values_json_has_no_type_for():
    value = {"zeta": [3, {"b": 1, "a": 2}], "alpha": None}
    assert json_text.dumps(value, sort_keys=True) == json.dumps(
        value, sort_keys=True, separators=(",", ":"))
    # Without a default, as with json.dumps: refused, for the caller to say so.
    for refused in ({"when": datetime.datetime(2026, 12, 3)}, {"x": object()}):
        try:
            json_text.dumps(refused, sort_keys=True)
        except TypeError:
            continue
        raise AssertionError(f"{refused} was written")
