"""ComputeCapabilitiesFilter: the flavor's extra specs against host capabilities."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from typing import Callable

import numpy as np

from nova_sched.scheduler import filters
from nova_sched.scheduler.filters import extra_specs_ops

LOG = logging.getLogger(__name__)

_SCOPE = "capabilities"
_INVALID_JSON = object()


@dataclasses.dataclass(frozen=True)
class _Requirement:
    key: str
    path: tuple[str, ...]
    req: str
    # An unscoped key ("free_ram_mb") applies only to hosts that have such
    # an attribute or stats entry; other hosts ignore it.
    unscoped: bool
    check: Callable[[str], bool] = dataclasses.field(compare=False, repr=False)
    # Outcome per capability string: hosts of one kind share their values.
    outcomes: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def matches(self, cap) -> bool:
        text = str(cap)
        outcome = self.outcomes.get(text)
        if outcome is None:
            outcome = self.outcomes[text] = bool(self.check(text))
        return outcome


@functools.lru_cache(maxsize=4096)
def _load_json(text: str):
    # Hosts of one model report identical cpu_info strings: parse each once.
    try:
        return json.loads(text)
    except ValueError:
        return _INVALID_JSON


def _attribute(obj, name: str):
    # Private attributes (the host's table, its row) are not capabilities.
    if name.startswith("_"):
        return None
    return getattr(obj, name, None)


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

    # The flavor and the host's capabilities do not change within a request.
    run_filter_once_per_request = True

    def __init__(self):
        # (spec, its extra_specs dict, parsed requirements) of the last request.
        self._parsed: tuple = (None, None, ())

    def _requirements(self, spec) -> tuple[_Requirement, ...]:
        cached_spec, cached_specs, reqs = self._parsed
        if cached_spec is spec and cached_specs is spec.extra_specs:
            return reqs
        parsed = []
        for key, req in spec.extra_specs.items():
            scope = str(key).split(":")
            if len(scope) == 1:
                path, unscoped = tuple(scope), True
            elif scope[0] == _SCOPE:
                path, unscoped = tuple(scope[1:]), False
            else:
                continue
            parsed.append(_Requirement(str(key), path, str(req), unscoped,
                                       extra_specs_ops.matcher(req)))
        reqs = tuple(parsed)
        self._parsed = (spec, spec.extra_specs, reqs)
        return reqs

    @staticmethod
    def _capability(host_state, path: tuple[str, ...]):
        """The value at ``path`` in the host's capabilities, None if absent."""
        cap = host_state
        for name in path:
            if isinstance(cap, str):
                cap = _load_json(cap)
                if cap is _INVALID_JSON:
                    return None
            if isinstance(cap, dict):
                cap = cap.get(name)
            else:
                value = _attribute(cap, name)
                if value is None:
                    stats = getattr(cap, "stats", None)
                    if not isinstance(stats, dict):
                        return None
                    value = stats.get(name)
                cap = value
            if cap is None:
                return None
        return cap

    def _satisfies(self, host_state, reqs) -> bool:
        for requirement in reqs:
            if requirement.unscoped:
                name = requirement.key
                stats = host_state.stats or {}
                has_it = (
                    not name.startswith("_") and hasattr(host_state, name)
                ) or name in stats
                if not has_it:
                    continue
            cap = self._capability(host_state, requirement.path)
            if cap is None:
                if LOG.isEnabledFor(logging.DEBUG):
                    LOG.debug("%s fails: no capability %s", host_state, requirement.key)
                return False
            if not requirement.matches(cap):
                if LOG.isEnabledFor(logging.DEBUG):
                    LOG.debug(
                        "%s fails extra spec %s: %r does not match %r",
                        host_state, requirement.key, requirement.req, cap,
                    )
                return False
        return True

    def host_passes(self, host_state, spec) -> bool:
        return self._satisfies(host_state, self._requirements(spec))

    def filter_all(self, table, rows, spec):
        reqs = self._requirements(spec)
        if not reqs:
            return np.ones(len(rows), dtype=bool)
        states = table.states
        return np.fromiter(
            (self._satisfies(states[r], reqs) for r in rows),
            dtype=bool,
            count=len(rows),
        )
