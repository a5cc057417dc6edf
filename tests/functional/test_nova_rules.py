"""Metric percentages and image properties as nova reads them, end to end.

A cloud of its own whose hosts are compute reports cast over RabbitMQ (as
nova's compute writes them: percentages as fractions) and whose aggregates
isolate image properties; ``explain`` (Havana, API 2.10, a plain
oslo.messaging client) and ``select_destinations`` (API 4.5, sent by
today's nova's own SchedulerAPI, which builds the image through nova's
ImageMeta) must give the figures below, computed by hand from nova's rules.

The fleet (``[metrics] weight_setting = cpu.percent=-1.0,
cpu.frequency=0.01``, ``weight_multiplier = 2.0``):

====== ===================== ============================ =====================
host   supported_instances   cpu.frequency, cpu.percent   aggregate metadata
               (stored as nova's compute writes it)
====== ===================== ============================ =====================
m-a    x86_64/kvm/hvm        3000, 0.80                   hw_architecture=x86_64
m-b    aarch64/kvm/hvm       2000, 0.29                   hw_architecture=aarch64
m-c    x86_64, i686 kvm/hvm  2500, 0.45                   hw_qemu_guest_agent=True
m-d    x86_64/kvm/hvm        4000, (no cpu.percent)       (none)
====== ===================== ============================ =====================

nova's scheduler multiplies a stored percentage by 100 into an integer
field (nova/objects/monitor_metric.py): m-a 80, m-b 28 (0.29 x 100 is
28.999...), m-c 45. MetricsWeigher's raw weights (nova/scheduler/weights/
metrics.py, sum of ratio x value): m-a -80 + 30 = -50, m-b -28 + 20 = -8,
m-c -45 + 25 = -20. MetricsFilter removes m-d (no cpu.percent). Weights
are normalised over the hosts weighed (nova/weights.py: (w - min) /
(max - min)) and multiplied by 2.0.

Before this reading, nova-sched weighed the fractions (m-a -0.8 + 30 =
29.2 first) and compared the image's raw properties (``amd64`` against an
aggregate's ``x86_64``, ``yes`` against ``True``), choosing otherwise in
every request below.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import oslo_messaging as messaging
import pytest

import cloudlib

pytestmark = pytest.mark.integration

FILTERS = ["ComputeFilter", "AggregateImagePropertiesIsolation",
           "ImagePropertiesFilter", "MetricsFilter"]
DRIVER = Path(__file__).with_name("nova_client_driver.py")


def _metrics(**values):
    return [{"name": name.replace("_", "."), "value": value, "source": "libvirt.LibvirtDriver",
             "timestamp": "2026-12-02T00:00:00.000000"} for name, value in values.items()]


# host -> (supported_instances, metrics as nova's compute stores them)
HOSTS = {
    "m-a": ([["x86_64", "kvm", "hvm"]], _metrics(cpu_frequency=3000, cpu_percent=0.8)),
    "m-b": ([["aarch64", "kvm", "hvm"]], _metrics(cpu_frequency=2000, cpu_percent=0.29)),
    "m-c": ([["x86_64", "kvm", "hvm"], ["i686", "kvm", "hvm"]],
            _metrics(cpu_frequency=2500, cpu_percent=0.45)),
    "m-d": ([["x86_64", "kvm", "hvm"]], _metrics(cpu_frequency=4000)),
}
AGGREGATES = {
    "agg-x86": ("m-a", "hw_architecture=x86_64"),
    "agg-arm": ("m-b", "hw_architecture=aarch64"),
    "agg-agent": ("m-c", "hw_qemu_guest_agent=True"),
}


def _report(host, supported, metrics):
    return {
        "host": host, "hypervisor_hostname": host, "vcpus": 8, "memory_mb": 8192,
        "local_gb": 100, "vcpus_used": 0, "memory_mb_used": 0, "local_gb_used": 0,
        "free_ram_mb": 8192, "free_disk_gb": 100, "disk_available_least": 100,
        "running_vms": 0, "current_workload": 0, "hypervisor_type": "QEMU",
        "hypervisor_version": 8002000, "cpu_info": "{}", "host_ip": "192.0.2.10",
        "supported_instances": supported, "stats": {"num_instances": 0},
        "metrics": metrics,
    }


@pytest.fixture(scope="module")
def rules_cloud(rabbitmq, workdir):
    c = cloudlib.Cloud(workdir("nova_rules"), "novarules")
    try:
        c.write_config(c.config_file, {
            "DEFAULT": {"service_down_time": 600},
            "filter_scheduler": {"enabled_filters": FILTERS,
                                 "weight_classes": ["MetricsWeigher"]},
            "metrics": {"weight_setting": "cpu.percent=-1.0, cpu.frequency=0.01",
                        "weight_multiplier": 2.0},
        })
        c.db_sync()
        for name, (host, metadata) in AGGREGATES.items():
            for args in (("create", name), ("add-host", name, host),
                         ("set-metadata", name, metadata)):
                done = c.run_manage("aggregate", *args)
                assert done.returncode == 0, done.stderr
        c.start_daemon()

        def _known():
            c.assert_running()
            for host, (supported, metrics) in HOSTS.items():
                c.client.compute_node_update(cloudlib.request_context(),
                                             _report(host, supported, metrics))
            time.sleep(0.5)
            try:
                reply = _explain(c, {}, timeout=5)
            except messaging.MessagingTimeout:  # not consuming yet
                return False
            return len(reply["hosts"]) + sum(map(len, reply["removed"].values())) == 4

        # Casts sent before the daemon declared its queue are dropped.
        cloudlib.wait_until(_known, 90, 0.5, "the daemon to know the four hosts")
        yield c
    finally:
        codes = c.close()
    assert all(code == 0 for code in codes.values()), codes


def _explain(cloud, image_props, timeout=30):
    spec, fprops, _ = cloudlib.havana_request(cloudlib.named_flavor("m1.tiny"))
    spec["image"]["properties"] = dict(image_props)
    cctxt = cloud.client.client.prepare(version="2.10", timeout=timeout)
    return cctxt.call(cloudlib.request_context(), "explain",
                      request_spec=spec, filter_properties=fprops)


def _removed(reply):
    return {name: sorted(host for host, _node in hosts)
            for name, hosts in reply["removed"].items() if hosts}


def _weighed(reply):
    return [(h["host"], pytest.approx(h["weights"]["MetricsWeigher"], abs=1e-9))
            for h in reply["hosts"]]


def test_legacy_architecture_is_isolated_as_hw_architecture(rules_cloud):
    # architecture=x86_64 is nova's hw_architecture: agg-arm's aarch64
    # keeps it off m-b (before: ImagePropertiesFilter removed it instead).
    reply = _explain(rules_cloud, {"architecture": "x86_64"})
    assert _removed(reply) == {"AggregateImagePropertiesIsolation": ["m-b"],
                               "MetricsFilter": ["m-d"]}
    # m-a -50, m-c -20: (w + 50) / 30 x 2.
    assert _weighed(reply) == [("m-c", 2.0), ("m-a", 0.0)]


def test_flexible_boolean_and_percentages_over_three_hosts(rules_cloud):
    # hw_qemu_guest_agent=1 is True, str() 'True': agg-agent keeps m-c.
    reply = _explain(rules_cloud, {"hw_qemu_guest_agent": "1"})
    assert _removed(reply) == {"MetricsFilter": ["m-d"]}
    # min -50 (m-a), max -8 (m-b): m-c (-20 + 50) / 42 x 2 = 1.428571...
    assert _weighed(reply) == [("m-b", 2.0), ("m-c", 60 / 42), ("m-a", 0.0)]


def test_canonical_architecture_and_false_boolean(rules_cloud):
    # amd64 is x86_64 (m-a's aggregate agrees, m-b's does not); "no" is
    # False, which asks agg-agent for nothing.
    reply = _explain(rules_cloud, {"hw_architecture": "amd64",
                                   "hw_qemu_guest_agent": "no"})
    assert _removed(reply) == {"AggregateImagePropertiesIsolation": ["m-b"],
                               "MetricsFilter": ["m-d"]}
    assert _weighed(reply) == [("m-c", 2.0), ("m-a", 0.0)]


def test_vm_mode_alias_reaches_image_properties_filter(rules_cloud):
    # vm_mode=hv is hw_vm_mode=hvm; i686 (from i386) only m-c supports.
    reply = _explain(rules_cloud, {"vm_mode": "hv", "hw_architecture": "i386"})
    assert _removed(reply) == {"AggregateImagePropertiesIsolation": ["m-a", "m-b"],
                               "ImagePropertiesFilter": ["m-d"]}
    # One host weighed: nova normalises a single value to 0.
    assert _weighed(reply) == [("m-c", 0.0)]


def test_bad_image_property_is_refused_naming_it(rules_cloud):
    with pytest.raises(messaging.RemoteError) as info:
        _explain(rules_cloud, {"hw_vm_mode": "paravirt", "hw_numa_nodes": "two"})
    assert info.value.exc_type == "InvalidRequestSpec"
    assert "image property hw_vm_mode='paravirt' must be one of hvm, xen" in info.value.value
    assert "image property hw_numa_nodes='two' must be a whole number" in info.value.value
    # ... and the daemon serves on.
    assert _weighed(_explain(rules_cloud, {}))[0] == ("m-b", 2.0)


def test_nova_4x_request_reads_the_same(rules_cloud, nova_python):
    # nova's conductor builds the image with ImageMeta.from_dict: the
    # daemon gets nova's typed ImageMetaProps (hw_architecture x86_64,
    # hw_qemu_guest_agent True) and must decide as explain does for the
    # same Glance properties.
    if rules_cloud.broker.isolated_topics:
        pytest.skip("needs a private RabbitMQ vhost: nova's topic is always 'scheduler'")
    props = {"architecture": "amd64", "hw_qemu_guest_agent": "yes"}
    expected = [h["host"] for h in _explain(rules_cloud, props)["hosts"]]
    assert expected == ["m-c", "m-a"]
    done = subprocess.run(
        [str(nova_python), str(DRIVER), "--transport-url", rules_cloud.broker.url,
         "--exchange", rules_cloud.exchange, "--uuids", str(uuid.uuid4()),
         "--image-props", json.dumps(props)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert "error" not in answer, answer
    (selections,) = answer["selections"]
    assert [s["service_host"] for s in selections] == expected
