"""ImagePropertiesFilter: the image's architecture, hypervisor and vm mode."""

from __future__ import annotations

import dataclasses
import logging
import re

import numpy as np

from nova_sched.conf import CONF
from nova_sched.scheduler import alike_hosts, filters

LOG = logging.getLogger(__name__)

# Image property names: nova's current name first, then its legacy name
# (nova's ImageMetaProps: the current name wins when both are set).
_ARCH = ("hw_architecture", "architecture")
_HV_TYPE = ("img_hv_type", "hypervisor_type")
_VM_MODE = ("hw_vm_mode", "vm_mode")
_HV_VERSION = ("img_hv_requested_version", "hypervisor_version_requires")

# nova.objects.fields canonicalisation of old or alternative spellings.
_ARCH_ALIASES = {
    "i386": "i686",
    "i486": "i686",
    "i586": "i686",
    "x86_32": "i686",  # a Xen mistake from Icehouse or earlier
    "x86_32p": "i686",
    "amd64": "x86_64",
}
_HV_TYPE_ALIASES = {"xapi": "xen"}
_VM_MODE_ALIASES = {"pv": "xen", "hv": "hvm", "baremetal": "hvm"}


def _canonical(value, aliases: dict[str, str]) -> str | None:
    if value is None or value == "":
        return None
    name = str(value).lower()
    return aliases.get(name, name)


def canonical_arch(value) -> str | None:
    """nova's Architecture.canonicalize: lower case, i386/x86_32 -> i686, amd64 -> x86_64."""
    return _canonical(value, _ARCH_ALIASES)


def canonical_hv_type(value) -> str | None:
    """nova's HVType.canonicalize: lower case, xapi -> xen (qemu stays qemu)."""
    return _canonical(value, _HV_TYPE_ALIASES)


def canonical_vm_mode(value) -> str | None:
    """nova's VMMode.canonicalize: lower case, pv -> xen, hv/baremetal -> hvm."""
    return _canonical(value, _VM_MODE_ALIASES)


def _canonical_triple(item: tuple) -> tuple:
    arch, hv_type, vm_mode = (tuple(item) + (None, None, None))[:3]
    return (canonical_arch(arch), canonical_hv_type(hv_type), canonical_vm_mode(vm_mode))


def version_to_str(version: int) -> str:
    """oslo's convert_version_to_str: 6001002 -> '6.1.2', 6000 -> '6.0'."""
    parts = []
    while version:
        parts.insert(0, str(version % 1000))
        version //= 1000
    return ".".join(parts)


_COMPARISON = re.compile(r"^\s*(<=|>=|<|>|!=|==)\s*(\d+(?:\.\d+)*)\s*$")
_VERSION = re.compile(r"^\s*(\d+(?:\.\d+)*)\s*$")
_COMPARE = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def _version_tuple(text: str) -> tuple[int, ...]:
    numbers = [int(p) for p in text.split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()  # 6.0 == 6.0.0, as distutils' StrictVersion compares
    return tuple(numbers)


class InvalidVersionPredicate(ValueError):
    pass


def parse_version_predicate(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """``'>=6.0,<6.2'`` -> ``[('>=', (6,)), ('<', (6, 2))]``.

    nova's grammar (distutils' VersionPredicate): comparisons separated by
    commas, each an operator among < <= > >= == != and a dotted version.
    Raises InvalidVersionPredicate on anything else.
    """
    predicate = []
    for part in str(text).split(","):
        found = _COMPARISON.match(part)
        if not found:
            raise InvalidVersionPredicate(
                f"bad hypervisor version requirement {text!r}: each comparison "
                "must be an operator (<, <=, >, >=, ==, !=) and a dotted version "
                "such as >=6.0"
            )
        predicate.append((found.group(1), _version_tuple(found.group(2))))
    return predicate


def version_satisfies(version, predicate) -> bool:
    """Whether a hypervisor version (nova's integer form) meets ``predicate``."""
    if isinstance(version, str):
        if not _VERSION.match(version):
            return False
        have = _version_tuple(version.strip())
    else:
        have = _version_tuple(version_to_str(int(version)))
    width = max([len(have)] + [len(v) for _, v in predicate])

    def pad(v):
        return v + (0,) * (width - len(v))

    return all(_COMPARE[op](pad(have), pad(want)) for op, want in predicate)


@dataclasses.dataclass(frozen=True)
class _ImageRequirement:
    props: tuple  # canonical (arch, hv_type, vm_mode), None where not asked
    version: list | None  # parsed img_hv_requested_version
    invalid_version: str | None = None
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
        if not hv_version or (self.version is None and not self.invalid_version):
            return True
        if self.invalid_version:
            return False
        outcome = self.version_outcomes.get(hv_version)
        if outcome is None:
            outcome = version_satisfies(hv_version, self.version)
            self.version_outcomes[hv_version] = outcome
        return outcome


def _image_prop(props: dict, names: tuple[str, str]):
    current, legacy = names
    value = props.get(current)
    return props.get(legacy) if value is None else value


class ImagePropertiesFilter(filters.BaseHostFilter):
    """Hosts that can run the image's architecture, hypervisor type and vm mode.

    nova's filter: the image's ``hw_architecture``, ``img_hv_type`` and
    ``hw_vm_mode`` (or their legacy names ``architecture``,
    ``hypervisor_type``, ``vm_mode``), canonicalised as nova does, must all
    appear in one ``[arch, hv_type, vm_mode]`` entry of the host's
    ``supported_instances``, and ``img_hv_requested_version`` (a predicate
    such as ``>=6.0,<6.2``) must hold for the host's ``hypervisor_version``
    when both are known. An image asking for none of the three passes
    everywhere; a host advertising no supported_instances fails any image
    that asks. A malformed version predicate fails every host that reports
    a hypervisor version (nova rejects such an image property outright).
    """

    def prepare(self, cycle) -> _ImageRequirement | None:
        """What the image asks of a host; None when it asks nothing."""
        spec = cycle.spec
        props = spec.image_props or {}
        # nova: an image that names no architecture is taken to need the
        # configured default one, when there is one.
        default_arch = CONF.filter_scheduler.image_properties_default_architecture
        wanted = (
            canonical_arch(_image_prop(props, _ARCH) or default_arch),
            canonical_hv_type(_image_prop(props, _HV_TYPE)),
            canonical_vm_mode(_image_prop(props, _VM_MODE)),
        )
        if not any(wanted):
            return None
        version_text = _image_prop(props, _HV_VERSION)
        version = invalid = None
        if version_text not in (None, ""):
            try:
                version = parse_version_predicate(version_text)
            except InvalidVersionPredicate as err:
                LOG.warning("image %s: %s", spec.image_id, err)
                invalid = str(version_text)
        return _ImageRequirement(wanted, version, invalid)

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
            return np.ones(len(rows), dtype=bool)
        # Nodes reporting the same supported_instances and hypervisor
        # version are one kind: each kind is judged once.
        kinds = cycle.table.kinds
        codes = kinds.codes(_KIND, _kind).take(rows)
        passes = alike_hosts.judge_kinds(
            rows, codes, kinds.values(_KIND),
            lambda kind: self._supported(kind, requirement))
        if LOG.isEnabledFor(logging.DEBUG) and not passes.all():
            LOG.debug("%d hosts do not support image properties %s (their "
                      "supported_instances or hypervisor version)",
                      int((~passes).sum()), cycle.spec.image_props)
        return passes


_KIND = "image_props.supported_instances_and_version"


def _kind(host_state) -> tuple:
    """What the filter reads of a node's report."""
    return host_state.supported_instances, host_state.hypervisor_version
