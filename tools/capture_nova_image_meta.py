#!/usr/bin/env python3
"""Capture nova's image property model: its fields, and its answers on examples.

Run with the python of a venv that has nova installed (tools/nova_venv.sh):

    ~/.cache/nova-sched/nova-venv-34.x/bin/python \\
        tools/capture_nova_image_meta.py \\
        --model nova_sched/scheduler/wire/nova_image_model.py \\
        --examples tests/unit/scheduler/fixtures/image_meta_nova34.json

It writes two files:

* ``--model``: the facts of nova's ImageMetaProps as a Python module that
  nova-sched imports: every field's name and how nova coerces it (its
  kind and, for enums, the valid values), the legacy property names, the
  NUMA cell limit, VIFModel's legacy spellings. nova-sched's own coercion
  code (nova_sched/scheduler/wire/image_meta.py) reads these; a new nova
  release is taken in by running this tool again and reading the diff.
* ``--examples``: image property dicts and what nova's
  ``ImageMetaProps.from_dict`` makes of each (every set field with its
  type, value and ``str()``, or the error), for the unit tests that hold
  nova-sched's reading to nova's.

A field whose coercion this tool does not know (a new field type, or an
enum with its own coerce) stops it with a message: the project's coercion
code must learn it first.

This file is run by nova's python, not the project's: it must not import
nova_sched.
"""

import argparse
import json
import pprint
import sys
import warnings
from importlib import metadata


class _Nova:
    """nova's modules, imported on first use: the unit tests load this
    file without nova, for ``encode`` alone."""

    def __getattr__(self, name):
        warnings.filterwarnings("ignore")
        from nova import objects
        from nova.objects import fields as nova_fields
        from nova.objects import image_meta
        from oslo_versionedobjects import fields as ovo_fields

        objects.register_all()
        self.Props = image_meta.ImageMetaProps
        self.fields = nova_fields
        self.ovo = ovo_fields
        # Enums whose coerce does more than check membership, and what
        # nova-sched calls that rule (nova_sched/scheduler/wire/image_meta.py
        # implements each).
        self.enum_rules = {
            nova_fields.Architecture: "architecture",
            nova_fields.HVType: "hv_type",
            nova_fields.VMMode: "vm_mode",
            nova_fields.OSType: "lower_enum",
            nova_fields.SCSIModel: "scsi_model",
            NOVA.fields.VIFModel: "vif_model",
        }
        self.plain_rules = {
            ovo_fields.FlexibleBooleanField: "boolean",
            ovo_fields.IntegerField: "integer",
            ovo_fields.StringField: "string",
            ovo_fields.UUIDField: "uuid",
            ovo_fields.VersionPredicateField: "version_predicate",
            ovo_fields.ListOfStringsField: "list_of_strings",
            ovo_fields.ListOfIntegersField: "list_of_integers",
            ovo_fields.ListOfSetsOfIntegersField: "list_of_cpu_sets",
            ovo_fields.ListOfDictOfNullableStringsField: "list_of_string_dicts",
        }
        return object.__getattribute__(self, name)


NOVA = _Nova()


def field_rule(name, field):
    """(kind, valid values or None) for one ImageMetaProps field."""
    if field.nullable or field.default is not NOVA.ovo.UnspecifiedDefault:
        sys.exit(f"{name}: nullable or defaulted fields are new to this tool")
    if isinstance(field, NOVA.ovo.BaseEnumField):
        enum = type(field._type)
        rule = NOVA.enum_rules.get(enum)
        if rule is None:
            if enum.coerce is not NOVA.ovo.Enum.coerce:
                sys.exit(f"{name}: {enum.__name__} has a coerce of its own; "
                         "teach nova_sched/scheduler/wire/image_meta.py and this tool")
            rule = "enum"
        return rule, tuple(field._type.valid_values)
    for cls, rule in NOVA.plain_rules.items():
        if type(field) is cls:
            return rule, None
    sys.exit(f"{name}: field type {type(field).__name__} is new to this tool")


def write_model(path):
    rules = {name: field_rule(name, field)
             for name, field in sorted(NOVA.Props.fields.items())}
    nova_version = metadata.version("nova")
    text = [
        '"""nova\'s ImageMetaProps, as facts: generated, do not edit.',
        "",
        f"Captured from nova {nova_version} (ImageMetaProps {NOVA.Props.VERSION}) by",
        "tools/capture_nova_image_meta.py; nova_sched/scheduler/wire/image_meta.py",
        "holds the rules that read image properties with these facts.",
        '"""',
        "",
        f"NOVA_VERSION = {nova_version!r}",
        f"MODEL_VERSION = {NOVA.Props.VERSION!r}",
        "",
        "# ImageMetaProps.NUMA_NODES_MAX: hw_numa_cpus.N / hw_numa_mem.N are read",
        "# for N from 0 up to the first gap, below this.",
        f"NUMA_NODES_MAX = {NOVA.Props.NUMA_NODES_MAX}",
        "",
        "# ImageMetaProps._legacy_property_map: old name -> current name.",
        "LEGACY_NAMES = " + pprint.pformat(dict(NOVA.Props._legacy_property_map),
                                           sort_dicts=False),
        "",
        "# VIFModel.LEGACY_VALUES: VMware's spellings -> nova's VIF model.",
        "VIF_LEGACY_VALUES = " + pprint.pformat(
            dict(NOVA.fields.VIFModel.LEGACY_VALUES)),
        "",
        "# Field name -> (kind, valid values for enums else None), in nova's",
        "# declaration order (the order nova sets them, so the order its first",
        "# error comes in).",
        "FIELDS = {",
    ]
    for name in NOVA.Props.fields:
        text.append(f"    {name!r}: {rules[name]!r},")
    text.append("}")
    with open(path, "w") as out:
        out.write("\n".join(text) + "\n")


# Examples: (image properties, what the example shows). Values are what a
# caller may send: Glance's strings, or the JSON types of a 4.x primitive.
_EXAMPLES = [
    ({"architecture": "x86_64"}, "legacy name"),
    ({"architecture": "amd64"}, "legacy name, alias value"),
    ({"hw_architecture": "AMD64"}, "case and alias"),
    ({"hw_architecture": "i386"}, "i386 -> i686"),
    ({"hw_architecture": "x86_32"}, "Xen's old name -> i686"),
    ({"hw_architecture": "sparc64"}, "not an architecture"),
    ({"hw_architecture": 64}, "not a string"),
    ({"architecture": "aarch64", "hw_architecture": "x86_64"},
     "current name wins over legacy"),
    ({"architecture": "bogus", "hw_architecture": "x86_64"},
     "a bad legacy value fails even under a good current one"),
    ({"hypervisor_type": "xapi"}, "legacy hv type, alias"),
    ({"img_hv_type": "QEMU"}, "hv type case"),
    ({"img_hv_type": "vbox"}, "unknown hv type"),
    ({"vm_mode": "pv"}, "legacy vm mode, pv -> xen"),
    ({"hw_vm_mode": "hv"}, "hv -> hvm"),
    ({"hw_vm_mode": "baremetal"}, "baremetal -> hvm"),
    ({"hw_vm_mode": "paravirt"}, "unknown vm mode"),
    ({"hw_qemu_guest_agent": "yes"}, "flexible boolean"),
    ({"hw_qemu_guest_agent": "no"}, "flexible boolean, false"),
    ({"hw_qemu_guest_agent": "On"}, "flexible boolean, case"),
    ({"hw_qemu_guest_agent": " 1 "}, "flexible boolean, spaces"),
    ({"hw_qemu_guest_agent": "maybe"}, "flexible boolean, anything else"),
    ({"hw_qemu_guest_agent": True}, "boolean"),
    ({"hw_qemu_guest_agent": 1}, "integer as boolean"),
    ({"hw_qemu_guest_agent": 2}, "integer 2 as boolean"),
    ({"hw_qemu_guest_agent": None}, "null"),
    ({"hw_numa_nodes": "2"}, "integer from text"),
    ({"hw_numa_nodes": 2.9}, "integer from a float"),
    ({"hw_numa_nodes": "2.5"}, "integer from decimal text"),
    ({"hw_numa_nodes": "two"}, "not an integer"),
    ({"hw_numa_nodes": True}, "boolean as integer"),
    ({"hw_numa_nodes": " 3 "}, "integer text with spaces"),
    ({"hw_numa_nodes": [2]}, "list as integer"),
    ({"hw_video_ram": "-8"}, "negative integer"),
    ({"hw_numa_nodes": "2", "hw_numa_cpus.0": "0-1", "hw_numa_cpus.1": "2,3",
      "hw_numa_mem.0": "1024", "hw_numa_mem.1": "2048"}, "NUMA cells"),
    ({"hw_numa_cpus.0": "0-3,^2", "hw_numa_mem.0": 512}, "CPU list exclusion"),
    ({"hw_numa_cpus.0": "0", "hw_numa_cpus.2": "2"}, "a gap ends the cells"),
    ({"hw_numa_cpus.0": "0-x"}, "bad CPU list"),
    ({"hw_numa_cpus.0": "3-1"}, "backwards CPU range"),
    ({"hw_numa_cpus.0": "^x"}, "bad CPU exclusion"),
    ({"hw_numa_cpus.0": 3}, "CPU list not text"),
    ({"hw_numa_mem.0": "1k"}, "bad cell memory"),
    ({"hw_numa_cpus": "0-3"}, "hw_numa_cpus itself is not read"),
    ({"hw_numa_mem": [1024]}, "hw_numa_mem itself is not read"),
    ({"hw_disk_bus": "virtio"}, "enum"),
    ({"hw_disk_bus": "VIRTIO"}, "enum is case sensitive"),
    ({"hw_disk_bus": "nvme"}, "not in the enum"),
    ({"os_type": "Linux"}, "os type lower cased"),
    ({"os_type": "solaris"}, "os type not known"),
    ({"hw_scsi_model": "lsiLogicsas"}, "VMware SCSI name"),
    ({"hw_scsi_model": "paravirtual"}, "VMware SCSI name"),
    ({"hw_vif_model": "VirtualE1000"}, "VMware VIF name"),
    ({"hw_vif_model": "e1000"}, "VIF model"),
    ({"vmware_adaptertype": "ide"}, "VMware adapter: ide"),
    ({"vmware_adaptertype": "lsiLogic"}, "VMware adapter: SCSI model"),
    ({"vmware_adaptertype": "busLogic", "hw_disk_bus": "virtio"},
     "current hw_disk_bus over the VMware adapter"),
    ({"vmware_adaptertype": "IDE"}, "VMware adapter case"),
    ({"trait:HW_CPU_X86_AVX2": "required", "trait:CUSTOM_GOLD": "required",
      "trait:HW_GPU_API_VULKAN": "forbidden"}, "required traits"),
    ({"traits_required": ["CUSTOM_X"]}, "traits_required itself is ignored"),
    ({"img_hv_requested_version": ">=6.0,<6.2"}, "version predicate"),
    ({"hypervisor_version_requires": ">= 2.1"}, "legacy version predicate"),
    ({"img_hv_requested_version": ">=6.0a1"}, "pre-release version"),
    ({"img_hv_requested_version": "6.0"}, "version without operator"),
    ({"img_hv_requested_version": 6}, "version not text"),
    ({"hw_cpu_realtime_mask": 5}, "integer as string"),
    ({"os_distro": True}, "boolean as string"),
    ({"os_distro": ["a"]}, "list as string"),
    ({"img_signature_certificate_uuid": "not-a-uuid"}, "uuid not checked"),
    ({"img_signature_certificate_uuid": 12}, "uuid from a number"),
    ({"img_mappings": [{"virtual": "root", "device": "/dev/sda"}]},
     "list of dicts"),
    ({"img_block_device_mapping": [{"boot_index": 0}]},
     "list of dicts, number value"),
    ({"img_block_device_mapping": [{"a": None}]}, "list of dicts, null"),
    ({"img_mappings": "[]"}, "list as text"),
    ({"img_mappings": ["x"]}, "list of non-dicts"),
    ({"auto_disk_config": "True"}, "legacy string field"),
    ({"owner_id": 7, "cache_in_nova": "yes", "xenapi_device_id": "3"},
     "legacy names of each kind"),
    ({"hw_tpm_version": 2.0}, "enum from a float"),
    ({"hw_mem_page_size": "large", "hw_cpu_policy": "dedicated",
      "hw_cpu_thread_policy": "isolate"}, "NUMA-related strings and enums"),
    ({"custom_property": "gold", "hw_numa_nodes": "1"}, "unknown properties"),
]


def _sample(kind, valid):
    """A value nova accepts for a field of ``kind``, as Glance sends it."""
    return {
        "boolean": "true", "integer": "3", "string": "text",
        "uuid": "8c9f7a2e-1b3d-4e5f-8a7b-9c0d1e2f3a4b",
        "version_predicate": ">=1.0", "list_of_strings": ["A", "B"],
        "list_of_integers": [1, 2], "list_of_string_dicts": [{"k": "v"}],
    }.get(kind, valid[0] if valid else None)


def encode(value):
    """A typed value as JSON that keeps bool apart from int and sets apart."""
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, str):
        return {"str": value}
    if isinstance(value, set):
        return {"set": sorted(value)}
    if isinstance(value, list):
        return {"list": [encode(v) for v in value]}
    if isinstance(value, dict):
        return {"dict": {k: encode(v) for k, v in value.items()}}
    if value is None:
        return {"none": None}
    raise TypeError(f"cannot encode {type(value).__name__}")


def _nova_answer(props):
    try:
        obj = NOVA.Props.from_dict(dict(props))
    except Exception as err:  # nova lets ValueError, TypeError and more out
        return {"error": type(err).__name__, "message": str(err)}
    return {"fields": {
        name: {"value": encode(getattr(obj, name)),
               "str": str(getattr(obj, name))}
        for name in NOVA.Props.fields if obj.obj_attr_is_set(name)}}


def write_examples(path):
    examples = list(_EXAMPLES)
    for name, field in NOVA.Props.fields.items():
        if name in ("hw_numa_cpus", "hw_numa_mem", "traits_required"):
            continue  # only through their Glance spellings (above)
        kind, valid = field_rule(name, field)
        examples.append(({name: _sample(kind, valid)}, f"{kind} field {name}"))
    answers = [{"shows": shows, "properties": props, "nova": _nova_answer(props)}
               for props, shows in examples]
    document = {
        "nova": metadata.version("nova"),
        "image_meta_props": NOVA.Props.VERSION,
        "made_by": "tools/capture_nova_image_meta.py",
        "examples": answers,
    }
    with open(path, "w") as out:
        json.dump(document, out, indent=1, sort_keys=False)
        out.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--examples", required=True)
    args = parser.parse_args()
    write_model(args.model)
    write_examples(args.examples)


if __name__ == "__main__":
    main()
