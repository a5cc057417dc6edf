"""ImagePropertiesFilter: the image's architecture, hypervisor and vm mode."""

from __future__ import annotations

import dataclasses
import logging

from oslo_utils import versionutils

from nova_sched.conf import CONF
from nova_sched.scheduler import filters
from nova_sched.scheduler.cloud import alike_hosts
from nova_sched.scheduler.wire import image_meta

LOG = logging.getLogger(__name__)

# The group's handle, kept (see nova_sched.conf).
_FILTER_SCHEDULER = CONF.filter_scheduler


def _canonical_triple(item: tuple) -> tuple:
    """A host's supported_instances entry as nova's HVSpec holds it."""
    arch, hv_type, vm_mode = (tuple(item) + (None, None, None))[:3]
    return (image_meta.canonical(arch, image_meta.ARCH_ALIASES),
            image_meta.canonical(hv_type, image_meta.HV_TYPE_ALIASES),
            image_meta.canonical(vm_mode, image_meta.VM_MODE_ALIASES))


def version_satisfies(version, predicate: versionutils.VersionPredicate) -> bool:
    """Whether a hypervisor version (nova's integer form) meets ``predicate``.

    nova's rule: the integer as dotted text (6001002 -> 6.1.2), compared
    as a version. A version reported as text is taken as it is; one that
    is not a version satisfies nothing.
    """
    text = version if isinstance(version, str) else versionutils.convert_version_to_str(
        int(version))
    try:
        return predicate.satisfied_by(text.strip())
    except ValueError:
        return False


@dataclasses.dataclass(frozen=True)
class _ImageRequirement:
    props: tuple  # canonical (arch, hv_type, vm_mode), None where not asked
    version: versionutils.VersionPredicate | None  # img_hv_requested_version
    # Outcomes per supported_instances entry and per hypervisor version,
    # for this decision: hosts of one kind share them.
    entry_outcomes: dict = dataclasses.field(default_factory=dict, compare=False)
    version_outcomes: dict = dataclasses.field(default_factory=dict, compare=False)

    def entry_matches(self, item) -> bool:
        try:
            key = tuple(item)
            outcome = self.entry_outcomes.get(key)
        except TypeError:  # not a sequence of names
            return False
        if outcome is None:
            triple = _canonical_triple(key)
            # nova checks each asked-for value against the whole entry, not
            # position by position.
            outcome = all(p is None or p in triple for p in self.props)
            self.entry_outcomes[key] = outcome
        return outcome

    def version_matches(self, hv_version) -> bool:
        if not hv_version or self.version is None:
            return True
        outcome = self.version_outcomes.get(hv_version)
        if outcome is None:
            outcome = version_satisfies(hv_version, self.version)
            self.version_outcomes[hv_version] = outcome
        return outcome


class ImagePropertiesFilter(filters.BaseHostFilter):
    """Hosts that can run the image's architecture, hypervisor type and vm mode.

    nova's filter: the image's ``hw_architecture``, ``img_hv_type`` and
    ``hw_vm_mode``, as nova's image model reads them (``image_meta``:
    legacy names ``architecture``, ``hypervisor_type``, ``vm_mode``,
    canonical values), must all appear in one ``[arch, hv_type, vm_mode]`` entry of the host's
    ``supported_instances``, and ``img_hv_requested_version`` (a predicate
    such as ``>=6.0,<6.2``) must hold for the host's ``hypervisor_version``
    when both are known. An image asking for none of the three passes
    everywhere; a host advertising no supported_instances fails any image
    that asks. A malformed property (an unknown architecture, a version
    predicate that does not parse) fails the request before any filter
    runs, where nova raises building its image model.
    """

    run_on_rebuild = True

    def prepare(self, cycle) -> _ImageRequirement | None:
        """What the image asks of a host; None when it asks nothing."""
        image = cycle.spec.image_props
        # nova: an image that names no architecture is taken to need the
        # configured default one, when there is one.
        default_arch = _FILTER_SCHEDULER.image_properties_default_architecture
        wanted = (
            image.get("hw_architecture")
            or image_meta.canonical(default_arch, image_meta.ARCH_ALIASES),
            image.get("img_hv_type"),
            image.get("hw_vm_mode"),
        )
        if not any(wanted):
            return None
        predicate = image.get("img_hv_requested_version")
        # image_meta has checked the predicate: it parses.
        version = versionutils.VersionPredicate(predicate) if predicate else None
        return _ImageRequirement(wanted, version)

    @staticmethod
    def _supported(kind: tuple, requirement: _ImageRequirement) -> bool:
        """Whether a node reporting ``kind`` (see ``_kind``) can run the image."""
        supported, hypervisor_version = kind
        if not supported:
            return False
        if not requirement.version_matches(hypervisor_version):
            return False
        for item in supported:
            if requirement.entry_matches(item):
                return True
        return False

    def filter_all(self, cycle, rows):
        requirement = cycle.prepared(self)
        if requirement is None:
            return filters.everyone(rows)
        # Nodes reporting the same supported_instances and hypervisor
        # version are one kind: each kind is judged once.
        kinds = cycle.table.kinds
        codes = cycle.table.pick(kinds.codes(_KIND, _kind), rows)
        passes = alike_hosts.judge_kinds(
            rows, codes, kinds.values(_KIND),
            lambda kind: self._supported(kind, requirement))
        if LOG.isEnabledFor(logging.DEBUG) and not passes.all():
            LOG.debug("%d hosts do not support image properties %s (their "
                      "supported_instances or hypervisor version)",
                      int((~passes).sum()), dict(cycle.spec.image_props.values))
        return passes


_KIND = "image_props.supported_instances_and_version"


def _kind(host_state) -> tuple:
    """What the filter reads of a node's report."""
    return host_state.supported_instances, host_state.hypervisor_version
