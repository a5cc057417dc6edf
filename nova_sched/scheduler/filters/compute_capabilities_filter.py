"""ComputeCapabilitiesFilter: the flavor's extra specs against host capabilities."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Callable

import numpy as np

from nova_sched.scheduler import alike_hosts, filters
from nova_sched.scheduler.filters import extra_specs_ops

LOG = logging.getLogger(__name__)

_SCOPE = "capabilities"
_INVALID_JSON = object()
_MISSING = object()
# What a requirement reads of a host whose unscoped key it does not apply to.
_NOT_APPLICABLE = ("not applicable",)
# host_state.derived name prefix: a top-level capability's parsed JSON text.
_PARSED = "compute_capabilities.parsed_json:"


@dataclasses.dataclass(frozen=True)
class _Requirement:
    key: str
    path: tuple[str, ...]
    req: str
    # An unscoped key ("free_ram_mb") applies only to hosts that have such
    # an attribute or stats entry; other hosts ignore it.
    unscoped: bool
    check: Callable[[str], bool] = dataclasses.field(compare=False, repr=False)


def _parse_json(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return _INVALID_JSON


def _attribute(obj, name: str):
    # Private attributes (the host's table, its row) and methods are not
    # capabilities.
    if name.startswith("_"):
        return None
    value = getattr(obj, name, None)
    return None if callable(value) else value


def _has_attribute(obj, name: str) -> bool:
    return (not name.startswith("_") and hasattr(obj, name)
            and not callable(getattr(obj, name)))


def _lookup(obj, name: str):
    """An attribute of ``obj``, else its ``stats`` entry; None if neither."""
    value = _attribute(obj, name)
    if value is None:
        stats = getattr(obj, "stats", None)
        if not isinstance(stats, dict):
            return None
        value = stats.get(name)
    return value


def _capability(host_state, path: tuple[str, ...]):
    """The value at ``path`` in the host's capabilities, None if absent."""
    cap = _lookup(host_state, path[0])
    for depth, name in enumerate(path[1:]):
        if cap is None:
            return None
        if isinstance(cap, str):
            if depth == 0:
                # Hosts of one model report one cpu_info text: parse it once
                # per report, not once per requirement and decision.
                top = path[0]
                cap = host_state.derived(
                    _PARSED + top, lambda hs: _parse_json(_lookup(hs, top)))
            else:
                cap = _parse_json(cap)
            if cap is _INVALID_JSON:
                return None
        if isinstance(cap, dict):
            cap = cap.get(name)
        else:
            cap = _lookup(cap, name)
    return cap


def _reading(host_state, requirement: _Requirement) -> Any:
    """What ``requirement`` reads of the host: the capability as text, None
    when the host lacks it, _NOT_APPLICABLE for an unscoped key that is the
    user's own."""
    if requirement.unscoped:
        name = requirement.key
        stats = host_state.stats if isinstance(host_state.stats, dict) else {}
        if not _has_attribute(host_state, name) and name not in stats:
            return _NOT_APPLICABLE
    cap = _capability(host_state, requirement.path)
    return None if cap is None else str(cap)


def _reader(requirement: _Requirement, sample) -> Callable[[Any], Any]:
    """``_reading`` of one requirement, specialised for speed.

    Every host state has the same attributes, so a key whose first name is
    none of them (``disk_type``, most extra specs) can only be read from
    the host's ``stats``: a dict lookup per host instead of the general walk.
    """
    first = requirement.path[0]
    if len(requirement.path) > 1 or _has_attribute(sample, first):
        return lambda host_state: _reading(host_state, requirement)
    absent = _NOT_APPLICABLE if requirement.unscoped else None

    def read(host_state):
        stats = host_state.stats
        value = stats.get(first, _MISSING) if isinstance(stats, dict) else _MISSING
        if value is _MISSING:
            return absent
        return None if value is None else str(value)

    return read


class ComputeCapabilitiesFilter(filters.BaseHostFilter):
    """Hosts whose capabilities satisfy the flavor's extra specs (nova's).

    A key is either unscoped (``free_ram_mb``), scoped to capabilities
    (``capabilities:hypervisor_type``), or scoped to something else
    (``hw:cpu_policy``, ``aggregate_instance_extra_specs:ssd``), which this
    filter ignores. A capability is looked up along the key's path,
    ``capabilities:cpu_info:features`` reading ``host_state.cpu_info`` and
    then its ``features``: an attribute of the host state first, its
    ``stats`` dict when the attribute is missing or None, a dict key within
    dicts, and a JSON string (such as ``cpu_info``) is parsed before looking
    inside it. The capability's ``str()`` must match the value under
    extra_specs_ops; a scoped capability the host lacks fails the host. An
    unscoped key that is neither an attribute nor a stats entry of the host
    is the user's own and is ignored.
    """

    def prepare(self, cycle) -> tuple[_Requirement, ...]:
        """The extra specs this filter reads, parsed once per decision."""
        parsed = []
        for key, req in cycle.spec.extra_specs.items():
            scope = str(key).split(":")
            if len(scope) == 1:
                path, unscoped = tuple(scope), True
            elif scope[0] == _SCOPE:
                path, unscoped = tuple(scope[1:]), False
            else:
                continue
            parsed.append(_Requirement(str(key), path, str(req), unscoped,
                                       extra_specs_ops.matcher(req)))
        return tuple(parsed)

    @staticmethod
    def _verdict(host_state, reqs, readings) -> bool:
        for requirement, cap in zip(reqs, readings):
            if cap is _NOT_APPLICABLE:
                continue
            if cap is None:
                LOG.debug("%s fails: no capability %s", host_state, requirement.key)
                return False
            if not requirement.check(cap):
                LOG.debug("%s fails extra spec %s: %r does not match %r",
                          host_state, requirement.key, requirement.req, cap)
                return False
        return True

    def filter_all(self, cycle, rows):
        reqs = cycle.prepared(self)
        if not reqs or not len(rows):
            return np.ones(len(rows), dtype=bool)
        states = cycle.table.states
        readers = [_reader(r, states[int(rows[0])]) for r in reqs]
        if len(readers) == 1:
            (read,) = readers

            def readings(row: int) -> tuple:
                return (read(states[row]),)
        else:
            def readings(row: int) -> tuple:
                state = states[row]
                return tuple(read(state) for read in readers)

        # Hosts that show the requirements the same capabilities agree.
        return alike_hosts.judge_rows(
            rows, readings,
            lambda row: self._verdict(states[row], reqs, readings(row)))
