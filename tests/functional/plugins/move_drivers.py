"""Fake virt drivers for the move scenarios (test_nova_cloud_moves).

nova's fake drivers accept every live migration: their
``check_can_live_migrate_destination`` always answers with migrate data.
A real driver refuses one now and then (a CPU model the source has and the
destination lacks, a shared storage check): conductor then removes the
scheduler's claim on that host and asks the scheduler again, up to
``[DEFAULT] migrate_max_retries``. ``MoveDriver`` refuses on demand so that
any host of the test cloud can play the refusing destination, chosen per
instance: the instance's metadata ``refuse_live_migration_on`` lists the
hosts (comma separated) whose pre-check fails for it. Without that key a
host behaves as nova's fake driver of the same size.

They run inside nova-compute, from the nova venv, so they import only nova
and the standard library; ``nova_compute_plugins.py`` registers this
module as ``nova.virt.move_drivers`` (so a compute's driver is, e.g.,
``move_drivers.MediumMoveDriver``).
"""

from __future__ import annotations

from nova import exception
from nova.virt import fake

# The instance metadata key naming the hosts that refuse its live migration.
REFUSE_KEY = "refuse_live_migration_on"


class MoveDriver(fake.FakeDriver):
    """nova's FakeDriver whose destination pre-check can refuse an instance."""

    def check_can_live_migrate_destination(self, context, instance,
                                           src_compute_info, dst_compute_info,
                                           block_migration=False,
                                           disk_over_commit=False):
        refusing = (instance.metadata or {}).get(REFUSE_KEY, "")
        if self._host in {h.strip() for h in refusing.split(",") if h.strip()}:
            # What a libvirt host answers when, e.g., its CPU lacks a flag of
            # the source's: conductor skips this host and retries.
            raise exception.MigrationPreCheckError(
                reason=f"{self._host} refuses {instance.uuid} ({REFUSE_KEY})")
        return super().check_can_live_migrate_destination(
            context, instance, src_compute_info, dst_compute_info,
            block_migration, disk_over_commit)


class MediumMoveDriver(MoveDriver):
    """MediumFakeDriver's size: 10 vCPU, 8 GB, 1028 GB."""

    vcpus = fake.MediumFakeDriver.vcpus
    memory_mb = fake.MediumFakeDriver.memory_mb
    local_gb = fake.MediumFakeDriver.local_gb


class SmallMoveDriver(MoveDriver):
    """SmallFakeDriver's size: 2 vCPU, 8 GB, 1028 GB."""

    vcpus = fake.SmallFakeDriver.vcpus
    memory_mb = fake.SmallFakeDriver.memory_mb
    local_gb = fake.SmallFakeDriver.local_gb
