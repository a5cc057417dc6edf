"""What a flavor and an image ask of a host, read as nova 34 reads them.

nova's ``virt/hardware.py`` reads each setting from the flavor's extra spec
(``hw:cpu_policy``) and the image's property (``hw_cpu_policy``) and
decides which wins or whether they conflict. The resource request
(``request_builder``) and the request filters (``request_filters``) turn
the answers into resources and traits. Where nova raises (an invalid
value, a flavor and an image that disagree), ``ResourceRequestRefused``
carries nova's message: nova's API refuses most of these before a request
is ever scheduled, so a request reaching the scheduler with them is one
nova-scheduler fails as well.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from oslo_utils import strutils

from nova_sched import exception
from nova_sched.scheduler.wire import image_meta
from nova_sched.scheduler.wire.cpu_spec import parse_cpu_spec

CPU_POLICIES = ("dedicated", "shared", "mixed")
CPU_THREAD_POLICIES = ("prefer", "isolate", "require")
EMULATOR_THREADS_POLICIES = ("share", "isolate")
PCI_NUMA_POLICIES = ("required", "legacy", "preferred", "socket")
SECURE_BOOT_POLICIES = ("required", "disabled", "optional")
MAXPHYSADDR_MODES = ("passthrough", "emulate")
TPM_VERSIONS = ("1.2", "2.0")
TPM_MODELS = ("tpm-tis", "tpm-crb")
SOUND_MODELS = ("sb16", "es1370", "pcspk", "ac97", "ich6", "ich9", "usb",
                "virtio")
EPHEMERAL_ENCRYPTION_FORMATS = ("plain", "luks", "luksv2")


@dataclasses.dataclass(frozen=True)
class MemEncryptionModel:
    """One memory encryption model and what it needs (nova's
    ``MemEncryptionConfig`` subclasses)."""

    name: str
    trait: str
    needs_stateless_firmware: bool
    firmware_type: str = "uefi"
    machine_type: str = "q35"


MEM_ENCRYPTION_MODELS = {
    model.name: model for model in (
        MemEncryptionModel("amd-sev", "HW_CPU_X86_AMD_SEV", False),
        MemEncryptionModel("amd-sev-es", "HW_CPU_X86_AMD_SEV_ES", False),
        MemEncryptionModel("amd-sev-snp", "HW_CPU_X86_AMD_SEV_SNP", True),
        MemEncryptionModel("intel-tdx", "HW_CPU_X86_INTEL_TDX", True),
    )
}


@dataclasses.dataclass(frozen=True)
class FlavorImage:
    """The parts of a request's flavor and image these rules read."""

    extra_specs: Mapping[str, Any]
    vcpus: int
    flavor_name: str | None = None
    image: image_meta.ImageProperties = image_meta.EMPTY
    image_name: str | None = None
    image_id: str | None = None

    @classmethod
    def of(cls, spec) -> "FlavorImage":
        """From a ``wire.request.RequestSpec``."""
        return cls(extra_specs=extra_specs_text(spec.extra_specs),
                   vcpus=spec.vcpus,
                   flavor_name=spec.instance_type.get("name"),
                   image=spec.image_props, image_name=spec.image.get("name"),
                   image_id=spec.image.get("id"))

    def both(self, key: str, prefix: str = "hw") -> tuple[Any, Any]:
        """The flavor's ``prefix:key`` and the image's ``prefix_key``."""
        return (self.extra_specs.get(f"{prefix}:{key}"),
                self.image.get(f"{prefix}_{key}"))

    def unique(self, key: str, prefix: str = "hw") -> Any:
        """The value set by either, refused when both set different ones."""
        flavor_value, image_value = self.both(key, prefix)
        if image_value and flavor_value and image_value != flavor_value:
            raise _refused(
                f"Flavor {self.flavor_name} has {prefix}:{key} extra spec "
                f"explicitly set to {flavor_value}, conflicting with image "
                f"{self.image_name} which has {prefix}_{key} explicitly set "
                f"to {image_value}.")
        return flavor_value or image_value


def extra_specs_text(extra_specs: Mapping[Any, Any]) -> dict[str, str]:
    """The extra specs as nova has them, text to text: a Havana caller's
    number or boolean becomes its text, a key that is not text is left
    out (nova's flavor API admits neither)."""
    return {key: value if isinstance(value, str) else str(value)
            for key, value in extra_specs.items()
            if isinstance(key, str) and value is not None}


def _refused(reason: str) -> exception.ResourceRequestRefused:
    return exception.ResourceRequestRefused(reason)


def _flag(text: Any) -> bool | None:
    return None if text is None else strutils.bool_from_string(text)


def _refuse_conflicting_flags(fi: FlavorImage, key: str, image_property: str,
                              flavor_text: Any, image_flag: Any) -> None:
    """Refused when the flavor's ``hw:<key>`` and the image's flag are both
    set and differ, in nova's words for memory and ephemeral encryption
    (``image_property``: the image's name in them, nova's own)."""
    flavor_flag = _flag(flavor_text)
    if (flavor_flag is not None and image_flag is not None
            and flavor_flag != image_flag):
        raise _refused(
            f"Flavor {fi.flavor_name} has hw:{key} extra spec "
            f"explicitly set to {flavor_text}, conflicting with image "
            f"{fi.image_name} which has {image_property} property "
            f"explicitly set to {image_flag}")


def _valid_pair(fi: FlavorImage, key: str, allowed, what: str) -> tuple[Any, Any]:
    """The flavor's and the image's ``key``, either refused when set to a
    value not in ``allowed``; nova words both of its CPU policies' invalid
    values so (``what``: the policy's name in the message)."""
    flavor_value, image_value = fi.both(key)
    for source, value in (("flavor extra specs", flavor_value),
                          ("image properties", image_value)):
        if value and value not in allowed:
            raise _refused(f"{what} requested from '{source}' is invalid, "
                           f"given: '{value}', available: '{str(allowed)}'.")
    return flavor_value, image_value


def cpu_policy(fi: FlavorImage) -> str | None:
    """``dedicated``, ``shared``, ``mixed`` or None (nova's
    ``get_cpu_policy_constraint``)."""
    flavor_policy, image_policy = _valid_pair(
        fi, "cpu_policy", CPU_POLICIES, "CPU policy")
    pinned = ("mixed", "dedicated")
    if flavor_policy == "dedicated":
        return flavor_policy
    if (flavor_policy == "mixed" and image_policy == "dedicated") or (
            flavor_policy == "shared" and image_policy in pinned):
        raise _refused("Image property 'hw_cpu_policy' is not permitted to "
                       "override CPU pinning policy set against the flavor")
    if flavor_policy in ("mixed", "shared"):
        return flavor_policy
    return image_policy if image_policy in CPU_POLICIES else None


def cpu_thread_policy(fi: FlavorImage) -> str | None:
    """nova's ``get_cpu_thread_policy_constraint``."""
    flavor_policy, image_policy = _valid_pair(
        fi, "cpu_thread_policy", CPU_THREAD_POLICIES, "CPU thread policy")
    if flavor_policy in (None, "prefer"):
        return flavor_policy or image_policy
    if image_policy and image_policy != flavor_policy:
        raise _refused("Image property 'hw_cpu_thread_policy' is not "
                       "permitted to override CPU thread pinning policy set "
                       "against the flavor")
    return flavor_policy


def emulator_threads_policy(fi: FlavorImage) -> str | None:
    """``hw:emulator_threads_policy`` (flavor only)."""
    policy = fi.extra_specs.get("hw:emulator_threads_policy")
    if not policy:
        return None
    if policy not in EMULATOR_THREADS_POLICIES:
        raise _refused("CPU emulator threads option requested is invalid, "
                       f"given: '{policy}', available: "
                       f"'{str(EMULATOR_THREADS_POLICIES)}'.")
    return policy


def _cpu_mask(mask: str, vcpus: int) -> set[int]:
    text = f"0-{vcpus - 1},{mask}" if mask.strip().startswith("^") else mask
    try:
        return parse_cpu_spec(text)
    except ValueError as err:
        raise _refused(str(err)) from None


def dedicated_cpus(fi: FlavorImage) -> set[int] | None:
    """The pinned CPUs of a mixed instance (``hw:cpu_dedicated_mask``)."""
    mask = fi.extra_specs.get("hw:cpu_dedicated_mask")
    if not mask:
        return None
    pcpus = _cpu_mask(mask, fi.vcpus)
    cpus = set(range(fi.vcpus))
    if not pcpus or not cpus - pcpus:
        raise _refused("Mixed instance must have at least 1 pinned vCPU and "
                       "1 unpinned vCPU. See 'hw:cpu_dedicated_mask'.")
    if not pcpus <= cpus:
        raise _refused("Mixed instance dedicated vCPU(s) mask is not a subset "
                       "of vCPUs in the flavor. See \"hw:cpu_dedicated_mask\"")
    return pcpus


def realtime_cpus(fi: FlavorImage) -> set[int] | None:
    """The realtime CPUs (``hw:cpu_realtime`` with its mask), or None."""
    if not strutils.bool_from_string(fi.extra_specs.get("hw:cpu_realtime")):
        return None
    flavor_mask, image_mask = fi.both("cpu_realtime_mask")
    mask = image_mask or flavor_mask
    cpus = set(range(fi.vcpus))
    realtime = _cpu_mask(mask, fi.vcpus) if mask else set(cpus)
    invalid = ("Use of realtime CPUs requires either one or more non-realtime "
               "CPU(s) or offloaded emulator threads.")
    if not realtime:
        raise _refused(invalid)
    if realtime == cpus and not emulator_threads_policy(fi):
        raise _refused(invalid)
    if not realtime <= cpus:
        raise _refused("Realtime policy vCPU(s) mask is configured with RT "
                       "vCPUs that are not a subset of the vCPUs in the "
                       "flavor. See hw:cpu_realtime_mask or "
                       "hw_cpu_realtime_mask")
    return realtime


def mem_encryption(fi: FlavorImage) -> MemEncryptionModel | None:
    """The memory encryption model asked for, or None (nova's
    ``get_mem_encryption_constraint``, with its checks of the image)."""
    flavor_text, image_flag = fi.both("mem_encryption")
    flavor_flag = _flag(flavor_text)
    if not flavor_flag and not image_flag:
        return None
    _refuse_conflicting_flags(fi, "mem_encryption", "hw_mem_encryption",
                              flavor_text, image_flag)
    requesters = []
    if flavor_flag:
        requesters.append(
            f"hw:mem_encryption extra spec in {fi.flavor_name} flavor")
    if image_flag:
        requesters.append("hw_mem_encryption property of image "
                          f"{fi.image_id or '<no-id>'}")
    flavor_model, image_model = fi.both("mem_encryption_model")
    if flavor_model is not None and image_model is not None \
            and flavor_model != image_model:
        raise _refused(
            f"Flavor {fi.flavor_name} has hw:mem_encryption_model extra spec "
            f"explicitly set to {flavor_model}, conflicting with image "
            f"{fi.image_name} which has hw_mem_encryption_model property "
            f"explicitly set to {image_model}")
    name = image_model or flavor_model or "amd-sev"
    model = MEM_ENCRYPTION_MODELS.get(name)
    if model is None:
        raise _refused(f"Invalid memory encryption model {name!r}. Allowed "
                       f"values: {', '.join(MEM_ENCRYPTION_MODELS)}.")
    if fi.image.get("hw_firmware_type") != model.firmware_type:
        raise _refused(
            f"Memory encryption is requested by {' and '.join(requesters)} "
            "but the image metadata doesn't have the 'hw_firmware_type' "
            f"property set to '{model.firmware_type}'")
    machine = fi.image.get("hw_machine_type")
    if machine is not None and model.machine_type not in machine:
        raise _refused(
            f"Machine type '{machine}' is not compatible with image "
            f"{fi.image_name} ({fi.image_id or '<no-id>'}): "
            f"{model.machine_type} type is required for {model.name} to work")
    if model.needs_stateless_firmware and not stateless_firmware(fi):
        raise _refused(
            f"The {model.name} memory encryption model requires stateless "
            "firmware but the image metadata doesn't have the "
            "'hw_firmware_stateless' property set to True")
    return model


def pmem_labels(fi: FlavorImage) -> list[str]:
    """``hw:pmem``'s namespace labels, one per namespace asked."""
    text = fi.extra_specs.get("hw:pmem")
    if not text:
        return []
    return [label.strip() for label in text.split(",") if label.strip()]


def vtpm(fi: FlavorImage) -> tuple[str, str] | None:
    """(version, model) of the vTPM asked for, or None."""
    version = fi.unique("tpm_version")
    if version is None:
        return None
    if version not in TPM_VERSIONS:
        raise _refused(f"Invalid TPM version {version!r}. Allowed values: "
                       f"{', '.join(TPM_VERSIONS)}.")
    model = fi.unique("tpm_model")
    if model is None:
        model = "tpm-tis"
    elif model not in TPM_MODELS:
        raise _refused(f"Invalid TPM model {model!r}. Allowed values: "
                       f"{', '.join(TPM_MODELS)}.")
    elif model == "tpm-crb" and version != "2.0":
        raise _refused("TPM model CRB is only valid with TPM version 2.0.")
    return version, model


def pci_numa_policy(fi: FlavorImage) -> str | None:
    """nova's ``get_pci_numa_policy_constraint``."""
    flavor_policy, image_policy = fi.both("pci_numa_affinity_policy")
    if flavor_policy and image_policy and flavor_policy != image_policy:
        raise _refused("Image property 'hw_pci_numa_affinity_policy' is not "
                       "permitted to override the "
                       "'hw:pci_numa_affinity_policy' flavor extra spec.")
    policy = flavor_policy or image_policy
    if policy and policy not in PCI_NUMA_POLICIES:
        raise _refused(f"Invalid PCI NUMA affinity configured: {policy}")
    return policy


def secure_boot(fi: FlavorImage) -> str | None:
    """``os:secure_boot`` / ``os_secure_boot``."""
    policy = fi.unique("secure_boot", prefix="os")
    if policy is not None and policy not in SECURE_BOOT_POLICIES:
        raise _refused(f"Invalid secure boot policy {policy!r}. Allowed "
                       f"values: {', '.join(SECURE_BOOT_POLICIES)}.")
    return policy


def maxphysaddr_mode(fi: FlavorImage) -> str | None:
    """``hw:maxphysaddr_mode`` / ``hw_maxphysaddr_mode``."""
    mode = fi.unique("maxphysaddr_mode")
    if mode is not None and mode not in MAXPHYSADDR_MODES:
        raise _refused(f"Invalid Maxphyaddr mode {mode!r}. Allowed values: "
                       f"{', '.join(MAXPHYSADDR_MODES)}.")
    return mode


def stateless_firmware(fi: FlavorImage) -> bool | None:
    """The image's ``hw_firmware_stateless``, only for UEFI firmware."""
    value = fi.image.get("hw_firmware_stateless")
    if value is None or fi.image.get("hw_firmware_type") != "uefi":
        return None
    return value


def packed_virtqueue(fi: FlavorImage) -> bool:
    """``hw:virtio_packed_ring`` / ``hw_virtio_packed_ring``."""
    flavor_text, image_value = fi.both("virtio_packed_ring")
    flavor_flag = _flag(flavor_text)
    image_flag = _flag(image_value) if image_value is not None else None
    if (flavor_flag is not None and image_flag is not None
            and flavor_flag != image_flag):
        raise _refused(
            "Flavor has hw:virtio_packed_ring extra spec explicitly set to "
            f"{flavor_flag}, conflicting with image which has "
            f"hw_virtio_packed_ring explicitly set to {image_flag}.")
    return bool(flavor_flag or image_flag)


def ephemeral_encryption(fi: FlavorImage) -> bool:
    """``hw:ephemeral_encryption`` / ``hw_ephemeral_encryption``."""
    flavor_text, image_flag = fi.both("ephemeral_encryption")
    _refuse_conflicting_flags(fi, "ephemeral_encryption", "hw_eph_encryption",
                              flavor_text, image_flag)
    return bool(_flag(flavor_text) or image_flag)


def ephemeral_encryption_format(fi: FlavorImage) -> str | None:
    """The ephemeral encryption format asked for, if any."""
    fmt = fi.unique("ephemeral_encryption_format")
    if not fmt:
        return None
    if fmt not in EPHEMERAL_ENCRYPTION_FORMATS:
        raise _refused(f"Invalid ephemeral encryption format {fmt}. Allowed "
                       f"values: {', '.join(EPHEMERAL_ENCRYPTION_FORMATS)}")
    return fmt


def sound_model(fi: FlavorImage) -> str | None:
    """``hw:sound_model`` / ``hw_sound_model``."""
    model = fi.unique("sound_model")
    if model and model not in SOUND_MODELS:
        raise _refused(f"Invalid sound device model {model!r}. Allowed "
                       f"values: {', '.join(SOUND_MODELS)}.")
    return model
