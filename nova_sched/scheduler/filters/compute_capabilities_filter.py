"""ComputeCapabilitiesFilter: the flavor's extra specs against host capabilities."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Callable

import numpy as np

from nova_sched.scheduler import filters
from nova_sched.scheduler.cloud import alike_hosts, host_kinds
from nova_sched.scheduler.cloud.host_state import attribute_kind
from nova_sched.scheduler.filters import extra_specs_ops

LOG = logging.getLogger(__name__)

_SCOPE = "capabilities"
_INVALID_JSON = object()
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

    def filter_all(self, cycle, rows):
        reqs = cycle.prepared(self)
        passes = np.ones(len(rows), dtype=bool)
        for requirement in reqs:
            if not len(rows):
                break
            passes &= self._meets(cycle, rows, requirement)
        return passes

    def _meets(self, cycle, rows, requirement: _Requirement) -> np.ndarray:
        """Which rows satisfy one requirement, column-wise.

        What a requirement reads is, by its first name: a figure claims
        change (``free_ram_mb``), compared as a column; the host's
        aggregates or zones, judged once per aggregate code; else the
        report (an attribute, ``stats``, JSON text within), judged once per
        kind of reading, whose codes the host table keeps.
        """
        states = cycle.table.states
        first = requirement.path[0]
        what = attribute_kind(first)

        def judge(row: int) -> bool:
            return _passes(requirement, _reading(states[row], requirement))

        if what == host_kinds.FIGURE:
            figures = host_kinds.figure_column(cycle, first, rows)
            check = extra_specs_ops.numeric_matcher(requirement.req)
            if len(requirement.path) == 1 and check is not None \
                    and figures.dtype.kind in "iuf":
                return check(figures)
            # Rows with the same figure read the same capability.
            _, codes = np.unique(figures, return_inverse=True)
            return alike_hosts.judge_rows(rows, codes.reshape(-1), judge)
        if what == host_kinds.AGGREGATES:
            codes, _ = host_kinds.aggregate_codes(cycle, first, rows)
            return alike_hosts.judge_rows(rows, codes, judge)
        if what == host_kinds.BY_HOST:
            codes, _ = host_kinds.by_host_codes(
                cycle, rows, lambda state: _reading(state, requirement))
            return alike_hosts.judge_rows(rows, codes, judge)
        kinds = cycle.table.kinds
        name = (_KIND, requirement.path, requirement.unscoped)
        codes = cycle.table.pick(
            kinds.codes(name, lambda state: _reading(state, requirement)), rows)
        return alike_hosts.judge_kinds(rows, codes, kinds.values(name),
                                       lambda cap: _passes(requirement, cap))


_KIND = "compute_capabilities.reading"


def _passes(requirement: _Requirement, cap) -> bool:
    """Whether a host reading ``cap`` satisfies the requirement."""
    if cap is _NOT_APPLICABLE:
        return True
    if cap is None:
        LOG.debug("hosts without capability %s fail", requirement.key)
        return False
    if not requirement.check(cap):
        LOG.debug("hosts with %s = %r fail extra spec %r", requirement.key, cap,
                  requirement.req)
        return False
    return True
