"""A request's image properties, read as nova's ImageMetaProps reads them.

nova's scheduler never sees the image's raw properties: its RequestSpec
carries an ImageMetaProps, built by ``ImageMetaProps.from_dict``
(nova/objects/image_meta.py), and every filter asks that object. This
module is nova-sched's one place doing the same, on both RPC paths (the
4.x path hands over the properties of nova's object, which read back to
themselves; the Havana path the image's properties as Glance has them):

* a legacy name becomes its current one (``architecture`` ->
  ``hw_architecture``, ``hypervisor_type`` -> ``img_hv_type``, ``vm_mode``
  -> ``hw_vm_mode``, ...); the current name wins when both are set, but a
  bad legacy value still fails, as in nova, which sets both in turn;
  VMware's ``vmware_adaptertype`` sets ``hw_disk_bus`` (``ide``, else
  ``scsi`` and ``hw_scsi_model``);
* each value is coerced to its field's type: flexible booleans
  (``yes``/``on``/``1``/``t``... true, anything else false), integers
  (Python's ``int()``: ``"3"``, ``2.9`` -> 2), strings (numbers and
  booleans as text), enums (exact members; architecture, hypervisor type
  and VM mode canonicalised first: ``amd64`` -> ``x86_64``, ``xapi`` ->
  ``xen``, ``pv`` -> ``xen``; OS type, SCSI and VIF models lower-cased and
  VMware's spellings mapped), version predicates (``>=6.0,<6.2``), lists;
* ``hw_numa_cpus.N`` / ``hw_numa_mem.N`` for N from 0 up to the first gap
  become the lists ``hw_numa_cpus`` (CPU sets) and ``hw_numa_mem`` (MB);
* ``trait:NAME = required`` becomes ``traits_required``;
* a property nova's model does not know is left out of the model; it is
  kept apart (``unknown``) for the one documented extension that reads it
  (AggregateImagePropertiesIsolation).

Where nova raises (a value that does not coerce, or a null), the request
fails here with InvalidImageProperties naming every such property, its
value and what was expected, before any filter runs.

The facts (field names, kinds, valid values, legacy names) are captured
from nova by tools/capture_nova_image_meta.py into ``nova_image_model``.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from typing import Any, Callable

from oslo_utils import strutils, versionutils

from nova_sched.scheduler.wire import nova_image_model
from nova_sched.scheduler.wire.cpu_spec import parse_cpu_spec

FIELDS = nova_image_model.FIELDS
LEGACY_NAMES = nova_image_model.LEGACY_NAMES

# nova.objects.fields: the aliases each canonicalize() maps (after
# lower-casing), and SCSIModel.coerce's VMware names.
ARCH_ALIASES = {
    "i386": "i686", "i486": "i686", "i586": "i686",
    "x86_32": "i686", "x86_32p": "i686",  # a Xen mistake from Icehouse or earlier
    "amd64": "x86_64",
}
HV_TYPE_ALIASES = {"xapi": "xen"}
VM_MODE_ALIASES = {"pv": "xen", "hv": "hvm", "baremetal": "hvm"}
_SCSI_ALIASES = {"lsilogicsas": "lsisas1068", "paravirtual": "vmpvscsi"}

_TRAIT_PREFIX = "trait:"
_VMWARE_ADAPTER = "vmware_adaptertype"


class _Bad(ValueError):
    """A value that does not coerce; the message says what was expected."""


@dataclasses.dataclass(frozen=True)
class ImageProperties:
    """An image's properties under nova's model.

    ``values``: every property nova's ImageMetaProps would set, under its
    current name, typed as nova types it. ``unknown``: the properties
    nova's model does not read, as sent.
    """

    values: Mapping[str, Any]
    unknown: Mapping[str, Any]

    def get(self, name: str, default: Any = None) -> Any:
        """nova's ``ImageMetaProps.get``: the value, or ``default`` when unset."""
        return self.values.get(name, default)

    def __contains__(self, name: str) -> bool:
        return name in self.values

    def as_named(self, name: str) -> Any:
        """A property by the name an operator wrote (aggregate metadata).

        A name nova's model knows gives nova's typed value (None when
        unset: nova's filters pass then); any other name the property as
        the image sent it. Legacy names are neither: nova reads them only
        as their current names.
        """
        if name in FIELDS:
            return self.values.get(name)
        return self.unknown.get(name)


EMPTY = ImageProperties({}, {})


class InvalidImageProperties(ValueError):
    """Image properties nova's model would not take: ``problems`` names each."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _text(value: Any) -> str:
    # oslo's String field: numbers, booleans (ints) and datetimes as text.
    if isinstance(value, (int, float, str, datetime.datetime)):
        return str(value)
    raise _Bad(f"must be text, not {type(value).__name__}")


def _integer(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise _Bad("must be a whole number") from None


def _version_predicate(value: Any) -> str:
    if not isinstance(value, str):
        raise _Bad(f"must be text, not {type(value).__name__}")
    try:
        versionutils.VersionPredicate(value)
    except ValueError:
        raise _Bad("must be comparisons separated by commas, each an operator "
                   "(<, <=, >, >=, ==, !=) and a version, such as >=6.0,<6.2") from None
    return value


def _member(value: Any, valid: tuple) -> str:
    # oslo's Enum: membership first (so 2.0 is not '2.0'), then as text.
    if value not in valid:
        raise _Bad("must be one of " + ", ".join(valid))
    return str(value)


def _lowered(value: Any) -> str:
    if not isinstance(value, str):
        raise _Bad(f"must be text, not {type(value).__name__}")
    return value.lower()


def canonical(value: Any, aliases: Mapping[str, str]) -> str | None:
    """nova's canonicalize() without the validity check: lower case, then the alias.

    For what hosts report (their supported_instances), which nova checks
    on the compute node; None for a missing or empty value.
    """
    if value is None or value == "":
        return None
    name = str(value).lower()
    return aliases.get(name, name)


def _canonical_member(aliases: Mapping[str, str]) -> Callable[[Any, tuple], str]:
    def coerce(value: Any, valid: tuple) -> str:
        name = _lowered(value)
        return _member(aliases.get(name, name), valid)
    return coerce


def _list(value: Any, element: Callable[[Any], Any]) -> list:
    if not isinstance(value, Iterable) or isinstance(value, (str, bytes, Mapping)):
        raise _Bad(f"must be a list, not {type(value).__name__}")
    return [element(item) for item in value]


def _string_dict(value: Any) -> dict:
    if not isinstance(value, dict):
        raise _Bad(f"must be a list of dicts, not of {type(value).__name__}")
    if not all(isinstance(key, str) for key in value):
        raise _Bad("must be a list of dicts with text keys")
    return {key: None if item is None else _text(item) for key, item in value.items()}


# Field kind (nova_image_model.FIELDS) -> coercion of one non-null value.
_COERCE: dict[str, Callable[[Any, tuple | None], Any]] = {
    "boolean": lambda value, _: strutils.bool_from_string(value),
    "integer": lambda value, _: _integer(value),
    "string": lambda value, _: _text(value),
    # oslo's UUID field only warns about a malformed uuid.
    "uuid": lambda value, _: str(value),
    "version_predicate": lambda value, _: _version_predicate(value),
    "enum": _member,
    "architecture": _canonical_member(ARCH_ALIASES),
    "hv_type": _canonical_member(HV_TYPE_ALIASES),
    "vm_mode": _canonical_member(VM_MODE_ALIASES),
    "lower_enum": _canonical_member({}),
    "scsi_model": _canonical_member(_SCSI_ALIASES),
    "vif_model": _canonical_member(nova_image_model.VIF_LEGACY_VALUES),
    "list_of_strings": lambda value, _: _list(value, _text),
    "list_of_integers": lambda value, _: _list(value, _integer),
    "list_of_string_dicts": lambda value, _: _list(value, _string_dict),
}


class _Reader:
    """One from_dict: sets fields in nova's order, gathering every problem."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.problems: list[str] = []

    def set(self, field: str, value: Any, sent_as: str) -> None:
        kind, valid = FIELDS[field]
        try:
            if value is None:
                raise _Bad("may not be null")
            self.values[field] = _COERCE[kind](value, valid)
        except _Bad as err:
            self.problem(sent_as if sent_as == field else f"{sent_as} (nova's {field})",
                         value, err)

    def problem(self, where: str, value: Any, err: ValueError) -> None:
        self.problems.append(f"image property {where}={_show(value)} {err}")

    def cells(self, props: Mapping[str, Any], field: str,
              read: Callable[[Any], Any]) -> list[str]:
        """``<field>.0``, ``<field>.1``... up to the first gap; the keys read."""
        keys, cells = [], []
        for cell in range(nova_image_model.NUMA_NODES_MAX):
            key = f"{field}.{cell}"
            if key not in props:
                break
            keys.append(key)
            try:
                cells.append(read(props[key]))
            except ValueError as err:  # _Bad, or parse_cpu_spec's
                self.problem(key, props[key], err)
        if keys and len(cells) == len(keys):
            self.values[field] = cells
        return keys


def _cell_cpus(value: Any) -> set[int]:
    if not isinstance(value, str):
        raise _Bad(f"must be a CPU list as text (such as 0-3,^2), not {type(value).__name__}")
    return parse_cpu_spec(value)


_CELL_READERS = {"hw_numa_cpus": _cell_cpus, "hw_numa_mem": _integer}
_FIELD_ORDER = {field: index for index, field in enumerate(FIELDS)}


def read(props: Mapping[str, Any] | None) -> ImageProperties:
    """``props`` under nova's model; InvalidImageProperties where nova raises."""
    if not props:
        return EMPTY
    reader = _Reader()
    consumed = set()
    if not props.keys().isdisjoint(LEGACY_NAMES):
        for legacy, field in LEGACY_NAMES.items():
            if legacy in props:
                consumed.add(legacy)
                reader.set(field, props[legacy], legacy)
    adapter = props.get(_VMWARE_ADAPTER)
    if _VMWARE_ADAPTER in props:
        consumed.add(_VMWARE_ADAPTER)
    if adapter == "ide":
        reader.set("hw_disk_bus", "ide", _VMWARE_ADAPTER)
    elif adapter:
        reader.set("hw_disk_bus", "scsi", _VMWARE_ADAPTER)
        reader.set("hw_scsi_model", adapter, _VMWARE_ADAPTER)
    # The fields the image has, in nova's order (that of the problems
    # reported): an image sets a few of the eighty-odd, and going over
    # every one cost a boot request about 8 us.
    present = [key for key in props if key in FIELDS and key not in _CELL_READERS
               and key != "traits_required"]
    present += [field for field in _CELL_READERS if f"{field}.0" in props]
    for field in sorted(present, key=_FIELD_ORDER.__getitem__):
        if field in _CELL_READERS:
            consumed.update(reader.cells(props, field, _CELL_READERS[field]))
        else:
            consumed.add(field)
            reader.set(field, props[field], field)
    # nova skips these under their own names: the NUMA lists come only from
    # their per-cell names (above), traits_required only from trait:NAME.
    consumed.update(props.keys() & {"traits_required", *_CELL_READERS})
    traits = []
    for key, value in props.items():
        if str(key).startswith(_TRAIT_PREFIX):
            consumed.add(key)
            if str(value) == "required":
                traits.append(str(key)[len(_TRAIT_PREFIX):])
    if traits:
        reader.values["traits_required"] = traits
    if reader.problems:
        raise InvalidImageProperties(reader.problems)
    unknown = {key: value for key, value in props.items() if key not in consumed}
    return ImageProperties(reader.values, unknown)
