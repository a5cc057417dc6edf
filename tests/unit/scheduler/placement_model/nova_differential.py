"""The scaffolding of the differential tests against nova 34.

test_request_builder and test_request_filters generate cases, have a
script run them through nova in the nova venv (nova_resource_request.py,
nova_request_filters.py), build nova-sched's queries from nova's
RequestSpec primitive and compare: what they share, the subprocess, the
parse of nova's primitive, the options set for one case and the failures
collected over all cases, is here.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

from oslo_config import cfg

from nova_sched import exception
from nova_sched.scheduler.placement_model import request_builder
from nova_sched.scheduler.wire import request, spec_obj

CONF = cfg.CONF
HERE = Path(__file__).resolve().parent
FUNCTIONAL = HERE.parents[2] / "functional"
SEED = int(os.environ.get("NOVA_SCHED_SEED", "39"))


def nova_venv_python() -> Path:
    if str(FUNCTIONAL) not in sys.path:
        sys.path.insert(0, str(FUNCTIONAL))
    import novacloud

    return novacloud.ensure_venv() / "bin" / "python"


def ask_nova(script: str, cases: list[dict]) -> list[dict]:
    """nova's answers for the cases, from one subprocess of ``script`` (a
    file next to this one) in the nova venv."""
    done = subprocess.run(
        [str(nova_venv_python()), str(HERE / script)],
        input=json.dumps(cases), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def generate(make_case, count: int, script: str) -> tuple[list[dict], list[dict]]:
    """``count`` cases (seeded) and nova's answers for them."""
    rng = random.Random(SEED)
    cases = [make_case(rng) for _ in range(count)]
    return cases, ask_nova(script, cases)


@contextlib.contextmanager
def overridden(**groups: dict):
    """The options given per group (``scheduler={...}``) set for one case,
    cleared after it whatever it raised."""
    try:
        for group, options in groups.items():
            for name, value in options.items():
                CONF.set_override(name, value, group)
        yield
    finally:
        for group, options in groups.items():
            for name in options:
                CONF.clear_override(name, group)


def ours(case: dict, primitive: dict, scheduler: dict, then=None):
    """nova-sched's queries for nova's primitive of ``case``, built with the
    ``[scheduler]`` options given and the case's PCPU fallback choice, then
    passed to ``then(spec, queries)`` if given: (the queries, None), or
    (None, the NoValidHost nova-sched refused with)."""
    with overridden(scheduler=scheduler,
                    workarounds={"disable_fallback_pcpu_query":
                                 case["conf"]["disable_fallback_pcpu_query"]}):
        try:
            legacy, fprops = spec_obj.to_legacy(primitive, [case["uuid"]])
            spec = request.parse(legacy, fprops)

            def lookup(host, node):
                return [u for h, n, u in case["nodes"]
                        if (host is None or h == host) and (node is None or n == node)]

            queries = request_builder.nova_queries(spec, lookup)
            if then is not None:
                then(spec, queries)
        except exception.NoValidHost as err:
            return None, err
    return queries, None


def assert_every_case_agrees(generated, compare, shown: int) -> None:
    """``compare(case, nova)`` finds nothing for any case; a failure shows
    the first ``shown`` cases' JSON (to rerun one) and what differs."""
    cases, answers = generated
    failures = []
    for one, nova in zip(cases, answers):
        problems = compare(one, nova)
        if problems:
            failures.append(f"case {json.dumps(one)}\n" + "\n".join(problems))
    assert not failures, (f"{len(failures)} of {len(cases)} cases differ; "
                          "first ones:\n\n" + "\n\n".join(failures[:shown]))
