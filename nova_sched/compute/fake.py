"""A simulated compute node, for test clouds and the embedded demo.

``FakeComputeNode`` is one hypervisor node kept in memory: it reports
itself in the shape of ``compute_node_update`` (CONTRACT section 3),
"builds" the instances the scheduler casts to it, and on a failed build
does what nova Havana's compute manager does in ``_reschedule_or_error``:
with a ``retry`` dict in ``filter_properties`` it records the error in
``retry['exc']``, narrows ``request_spec['instance_uuids']`` to the one
instance and casts ``run_instance`` back to the scheduler
(``is_first_time=False``); without one the instance goes to ERROR.

Like nova's compute it also checks the scheduler's ``limits`` before it
builds (the resource tracker's claim), so an overcommitting scheduler is
answered with a reschedule rather than silently believed.

``FakeComputeEndpoint`` is the RPC side: one endpoint object serves any
number of nodes and dispatches each ``run_instance`` on ``instance['host']``
(then ``node``). A real process (``nova-sched-fake-compute``) puts one node
behind one RPC server on ``Target(topic=compute_topic, server=host)``; an
embedding process such as the demo can create one server per host, all
sharing the same endpoint object. ``NodeReporter`` sends every node's
report to the scheduler at start and then periodically.

The fake compute reaches the scheduler only through RPC (reports and
reschedules through ``SchedulerAPI``). Recording build outcomes in instance
rows is the embedding process's choice: it passes an ``InstanceStore``
(``nova-sched-fake-compute`` does, behind ``[fake_compute]
record_instance_state``), and this module imports nothing of the database.

Embedding many nodes in one process (the demo)::

    nodes = {f"node-{i}": fake.FakeComputeNode(f"node-{i}", vcpus=16,
                 memory_mb=65536, local_gb=1000, rng=random.Random(i))
             for i in range(n)}
    endpoint = fake.FakeComputeEndpoint(nodes, SchedulerAPI(transport))
    servers = [rpc.get_server(transport, messaging.Target(
                   topic=CONF.compute_topic, server=host), [endpoint])
               for host in nodes]             # the scheduler casts to compute.<host>
    reporter = fake.NodeReporter(nodes.values(), endpoint.scheduler_api, 10)

oslo.messaging gives one RPC server one ``server`` name, so one queue per
host needs one server per host; the endpoint object is shared by all.

Nothing here logs ``admin_password`` or the contents of ``injected_files``.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import traceback
import zlib
from typing import Any, Iterable, Protocol

import oslo_messaging as messaging

LOG = logging.getLogger(__name__)

DEFAULT_SUPPORTED_INSTANCES = [["x86_64", "kvm", "hvm"]]
HYPERVISOR_TYPE = "kvm"
# libvirt's encoding of QEMU 6.2.0 (major * 1,000,000 + minor * 1,000 + micro).
HYPERVISOR_VERSION = 6002000

ACTIVE = "active"
ERROR = "error"
RESCHEDULED = "rescheduled"


class BuildFailed(Exception):
    """A build the simulated hypervisor refused or failed."""


class InstanceStore(Protocol):
    """Where build outcomes are recorded: an instance ACTIVE on its node, or
    in ERROR with the reason. Implementations touch instance rows only."""

    def mark_active(self, uuid: str, host: str, node: str) -> Any: ...

    def mark_error(self, uuid: str, message: str) -> Any: ...


def _whole(value: Any) -> int:
    try:
        return max(int(value or 0), 0)
    except (TypeError, ValueError):
        return 0


def _sizes(instance: dict, request_spec: dict | None) -> dict[str, int]:
    """The instance's sizes: its own fields, else the request's flavor."""
    flavor = {}
    if isinstance(request_spec, dict):
        flavor = request_spec.get("instance_type") or {}
        if not isinstance(flavor, dict):
            flavor = {}
    sizes = {}
    for field in ("memory_mb", "vcpus", "root_gb", "ephemeral_gb", "swap"):
        value = instance.get(field)
        if value is None:
            value = flavor.get(field)
        sizes[field] = _whole(value)
    return sizes


def _default_host_ip(host: str) -> str:
    """A stable loopback-range address per host name (data only, never used)."""
    h = zlib.crc32(host.encode())
    return f"127.{(h >> 16) & 0xFF}.{(h >> 8) & 0xFF}.{(h & 0xFF) or 1}"


def _format_exc(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


class FakeComputeNode:
    """One simulated hypervisor node with its instances in memory.

    ``fail_rate`` is the probability in [0, 1] that a build fails; ``rng``
    (a ``random.Random``) makes failures reproducible. ``instance_store``
    records ACTIVE/ERROR outcomes (None: not recorded). ``scheduler_api``
    (a ``SchedulerAPI``) is where failed builds are sent back; it may also
    be passed to ``build``.
    """

    def __init__(
        self,
        host: str,
        node: str | None = None,
        vcpus: int = 16,
        memory_mb: int = 32768,
        local_gb: int = 500,
        fail_rate: float = 0.0,
        rng: random.Random | None = None,
        *,
        reserved_host_memory_mb: int = 0,
        reserved_host_disk_mb: int = 0,
        reserved_host_cpus: int = 0,
        supported_instances: list | None = None,
        extra_stats: dict | None = None,
        host_ip: str | None = None,
        instance_store: InstanceStore | None = None,
        scheduler_api=None,
    ):
        if not 0.0 <= fail_rate <= 1.0:
            raise ValueError(f"fail_rate must be within [0, 1], got {fail_rate}")
        self.host = host
        self.node = node or host
        self.vcpus = int(vcpus)
        self.memory_mb = int(memory_mb)
        self.local_gb = int(local_gb)
        self.fail_rate = float(fail_rate)
        self.rng = rng or random.Random()
        self.reserved_host_memory_mb = int(reserved_host_memory_mb)
        self.reserved_host_disk_mb = int(reserved_host_disk_mb)
        self.reserved_host_cpus = int(reserved_host_cpus)
        self.supported_instances = [
            list(t) for t in (supported_instances or DEFAULT_SUPPORTED_INSTANCES)
        ]
        self.extra_stats = dict(extra_stats or {})
        self.host_ip = host_ip or _default_host_ip(host)
        self.instance_store = instance_store
        self.scheduler_api = scheduler_api
        self.failed_builds = 0
        self.builds_failed_total = 0
        # uuid -> {sizes, project_id, os_type}
        self.instances: dict[str, dict] = {}
        self._lock = threading.Lock()

    # -- usage ------------------------------------------------------------
    def _usage(self) -> dict[str, int]:
        mem = self.reserved_host_memory_mb
        disk = self.reserved_host_disk_mb // 1024
        cpus = 0
        for inst in self.instances.values():
            mem += inst["memory_mb"]
            disk += inst["root_gb"] + inst["ephemeral_gb"]
            cpus += inst["vcpus"]
        return {"memory_mb_used": mem, "local_gb_used": disk, "vcpus_used": cpus}

    def report(self) -> dict:
        """This node as a ``compute_node_update`` dict (CONTRACT section 3)."""
        with self._lock:
            used = self._usage()
            stats: dict[str, Any] = {
                "num_instances": len(self.instances),
                "num_vm_active": len(self.instances),
                "num_task_None": len(self.instances),
                # Builds are instantaneous here: nothing is in flight.
                "io_workload": 0,
                "failed_builds": self.failed_builds,
            }
            for inst in self.instances.values():
                for key in (f"num_proj_{inst['project_id']}",
                            f"num_os_type_{inst['os_type']}"):
                    stats[key] = stats.get(key, 0) + 1
            stats.update(self.extra_stats)
            running = len(self.instances)
        free_ram = self.memory_mb - used["memory_mb_used"]
        free_disk = self.local_gb - used["local_gb_used"]
        return {
            "host": self.host,
            "hypervisor_hostname": self.node,
            "vcpus": self.vcpus,
            "memory_mb": self.memory_mb,
            "local_gb": self.local_gb,
            "vcpus_used": used["vcpus_used"],
            "memory_mb_used": used["memory_mb_used"],
            "local_gb_used": used["local_gb_used"],
            "free_ram_mb": free_ram,
            "free_disk_gb": free_disk,
            "disk_available_least": free_disk,
            "running_vms": running,
            "current_workload": 0,
            "hypervisor_type": HYPERVISOR_TYPE,
            "hypervisor_version": HYPERVISOR_VERSION,
            "cpu_info": json.dumps(
                {
                    "arch": self.supported_instances[0][0],
                    "model": "fake",
                    "vendor": "nova-sched",
                    "topology": {"sockets": 1, "cores": self.vcpus, "threads": 1},
                    "features": [],
                }
            ),
            "host_ip": self.host_ip,
            "supported_instances": [list(t) for t in self.supported_instances],
            "stats": stats,
            "metrics": [],
            "reserved_host_memory_mb": self.reserved_host_memory_mb,
            "reserved_host_disk_mb": self.reserved_host_disk_mb,
            "reserved_host_cpus": self.reserved_host_cpus,
        }

    # -- builds -----------------------------------------------------------
    def _claim(self, uuid: str, sizes: dict[str, int], limits: dict) -> None:
        """Nova's resource-tracker claim against the scheduler's limits.

        Called with the lock held. Only the limits the scheduler sent are
        checked (none: the claim always succeeds, as in nova).
        """
        used = self._usage()
        checks = (
            ("memory_mb", "memory", "MB", used["memory_mb_used"], sizes["memory_mb"]),
            ("disk_gb", "disk", "GB", used["local_gb_used"],
             sizes["root_gb"] + sizes["ephemeral_gb"]),
            ("vcpu", "vcpu", "VCPU", used["vcpus_used"], sizes["vcpus"]),
        )
        for key, what, unit, in_use, wanted in checks:
            limit = limits.get(key)
            if limit is None:
                continue
            free = float(limit) - in_use
            if wanted > free:
                raise BuildFailed(
                    f"Insufficient compute resources: Free {what} {free:.2f} "
                    f"{unit} < requested {wanted} {unit}."
                )

    def _try_build(self, instance: dict, request_spec: dict | None,
                   filter_properties: dict) -> None:
        uuid = instance["uuid"]
        sizes = _sizes(instance, request_spec)
        with self._lock:
            if uuid in self.instances:
                return  # delivered twice: already built here
            if self.fail_rate and self.rng.random() < self.fail_rate:
                self.failed_builds += 1
                self.builds_failed_total += 1
                raise BuildFailed(
                    f"Simulated build failure of instance {uuid} on "
                    f"{self.host}/{self.node}"
                )
            limits = filter_properties.get("limits") or {}
            try:
                self._claim(uuid, sizes, limits if isinstance(limits, dict) else {})
            except BuildFailed:
                self.failed_builds += 1
                self.builds_failed_total += 1
                raise
            props = {}
            if isinstance(request_spec, dict):
                props = request_spec.get("instance_properties") or {}
            self.instances[uuid] = dict(
                sizes,
                project_id=instance.get("project_id") or props.get("project_id"),
                os_type=instance.get("os_type") or props.get("os_type"),
            )
            # nova's resource tracker forgets past failures on a success.
            self.failed_builds = 0

    def build(
        self,
        instance: dict,
        request_spec: dict | None,
        filter_properties: dict | None,
        *,
        context=None,
        scheduler_api=None,
        requested_networks=None,
        injected_files=None,
        admin_password=None,
        is_first_time: bool = True,
        legacy_bdm_in_spec: bool = True,
    ) -> str:
        """Build ``instance``; returns ACTIVE, RESCHEDULED or ERROR.

        On a failure the request goes back to the scheduler when
        ``filter_properties`` has a ``retry`` dict (nova Havana's
        ``_reschedule``), otherwise the instance goes to ERROR.
        """
        filter_properties = filter_properties if isinstance(filter_properties, dict) else {}
        uuid = instance["uuid"]
        try:
            self._try_build(instance, request_spec, filter_properties)
        except BuildFailed as exc:
            return self._reschedule_or_error(
                exc, instance, request_spec, filter_properties,
                context=context,
                scheduler_api=scheduler_api or self.scheduler_api,
                requested_networks=requested_networks,
                injected_files=injected_files,
                admin_password=admin_password,
                legacy_bdm_in_spec=legacy_bdm_in_spec,
            )
        LOG.info("Instance %s is active on %s/%s", uuid, self.host, self.node)
        if self.instance_store is not None:
            self.instance_store.mark_active(uuid, self.host, self.node)
        return ACTIVE

    def _reschedule_or_error(self, exc, instance, request_spec, filter_properties,
                             *, context, scheduler_api, requested_networks,
                             injected_files, admin_password, legacy_bdm_in_spec):
        uuid = instance["uuid"]
        retry = filter_properties.get("retry")
        if isinstance(retry, dict) and isinstance(request_spec, dict) and scheduler_api:
            retry["exc"] = _format_exc(exc)
            request_spec["instance_uuids"] = [uuid]
            LOG.info(
                "Build of instance %s failed on %s/%s (%s); re-scheduling "
                "run_instance: attempt %s",
                uuid, self.host, self.node, exc, retry.get("num_attempts"),
            )
            scheduler_api.run_instance(
                context, request_spec, admin_password, injected_files,
                requested_networks, False, filter_properties,
                legacy_bdm_in_spec=legacy_bdm_in_spec,
            )
            return RESCHEDULED
        if not isinstance(retry, dict):
            LOG.info("Retry info not present, will not reschedule instance %s", uuid)
        LOG.error("Build of instance %s failed on %s/%s: %s",
                  uuid, self.host, self.node, exc)
        if self.instance_store is not None:
            self.instance_store.mark_error(uuid, str(exc))
        return ERROR


class FakeComputeEndpoint:
    """The compute RPC API (``run_instance``, version 2.37) for simulated nodes.

    ``nodes`` maps a host name to its FakeComputeNode, so one endpoint (and
    one RPC server, or one server per host sharing this endpoint) serves
    many simulated nodes: each cast is dispatched on ``instance['host']``.
    ``scheduler_api`` is a ``SchedulerAPI``: failed builds go back through it.
    """

    target = messaging.Target(namespace=None, version="2.37")

    def __init__(self, nodes: dict[str, FakeComputeNode], scheduler_api):
        self.nodes = nodes
        self.scheduler_api = scheduler_api

    @messaging.expose
    def run_instance(self, context, instance, request_spec, filter_properties,
                     requested_networks, injected_files, admin_password,
                     is_first_time, node=None, legacy_bdm_in_spec=True):
        """Build ``instance`` on the node it was scheduled to."""
        uuid = instance.get("uuid") if isinstance(instance, dict) else None
        if not uuid:
            LOG.error("run_instance without an instance uuid: ignored")
            return
        host = instance.get("host")
        target = self.nodes.get(host)
        if target is None:
            LOG.error("run_instance of %s for host %r, which this process does "
                      "not simulate: ignored", uuid, host)
            return
        wanted = node or instance.get("node")
        if wanted and wanted != target.node:
            LOG.warning("run_instance of %s names node %r; %s simulates %r",
                        uuid, wanted, host, target.node)
        target.build(
            instance, request_spec, filter_properties,
            context=context, scheduler_api=self.scheduler_api,
            requested_networks=requested_networks,
            injected_files=injected_files,
            admin_password=admin_password,
            is_first_time=is_first_time,
            legacy_bdm_in_spec=legacy_bdm_in_spec,
        )


class NodeReporter:
    """Sends each node's report (``compute_node_update``) now and periodically.

    The reports also count as the hosts' service heartbeats, so the interval
    must stay well under the scheduler's ``service_down_time``.
    """

    def __init__(self, nodes: Iterable[FakeComputeNode], scheduler_api,
                 interval: float = 10.0, context=None):
        self.nodes = list(nodes)
        self.scheduler_api = scheduler_api
        self.interval = float(interval)
        self.context = context
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _ctxt(self):
        if self.context is None:
            from nova_sched import rpc

            self.context = rpc.admin_context()
        return self.context

    def report_now(self) -> None:
        for node in self.nodes:
            try:
                self.scheduler_api.compute_node_update(self._ctxt(), node.report())
            except Exception:
                LOG.exception("Report of %s/%s failed", node.host, node.node)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.report_now()
            self._stop.wait(self.interval)

    def start(self) -> None:
        """Report at once, then every ``interval`` seconds from a thread."""
        self._thread = threading.Thread(
            target=self._run, name="fake-compute-reporter", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
