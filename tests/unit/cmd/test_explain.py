"""nova-sched-manage explain: parsing, the request it builds, its output.

No broker: the RPC call is replaced by a canned reply (or a canned failure).
"""

from __future__ import annotations

import argparse
import json
import socket

import oslo_messaging as messaging
import pytest

from nova_sched.cmd import explain, manage
from nova_sched.conf import CONF
from nova_sched.scheduler.wire import request

CANNED = {
    "hosts": [
        {"host": "compute-3", "nodename": "compute-3", "weight": 2.5,
         "weights": {"RAMWeigher": 1.0, "CPUWeigher": 1.0, "DiskWeigher": 0.5}},
        {"host": "compute-10", "nodename": "node-b", "weight": 0.25,
         "weights": {"RAMWeigher": 0.0, "CPUWeigher": 0.25, "DiskWeigher": 0.0}},
    ],
    # The daemon's order is the order the filters ran: not alphabetical.
    "removed": {
        "RetryFilter": [],
        "RamFilter": [["compute-1", "compute-1"], ["compute-2", "node-x"]],
        "ComputeFilter": [["compute-5", "compute-5"]],
    },
    "reason": "2/5 hosts available: RamFilter removed 2, ComputeFilter removed 1",
}


@pytest.fixture
def cli(tmp_path, capsys, monkeypatch):
    """run(*args) -> (code, stdout, stderr, requests sent) with a canned daemon."""
    conf = tmp_path / "nova-sched.conf"
    conf.write_text(f"[database]\nconnection = sqlite:///{tmp_path}/x.sqlite\n")
    sent: list[dict] = []
    reply = {"value": CANNED}

    def fake_ask(request_spec, filter_properties, timeout):
        sent.append({"request_spec": request_spec,
                     "filter_properties": filter_properties, "timeout": timeout})
        if isinstance(reply["value"], Exception):
            raise reply["value"]
        return reply["value"]

    monkeypatch.setattr(explain, "ask_scheduler", fake_ask)

    def run(*args: str):
        code = manage.main(["--config-file", str(conf), "explain", *args])
        out, err = capsys.readouterr()
        return code, out, err, sent

    run.reply = reply
    return run


# -- parsing ----------------------------------------------------------------
@pytest.mark.parametrize("text, sizes", [
    ("512,1,5", (512, 1, 5)),
    (" 2048 , 4 , 0 ", (2048, 4, 0)),
])
def test_flavor_parses_three_whole_numbers(text, sizes):
    assert explain.parse_flavor(text) == sizes


@pytest.mark.parametrize("text", [
    "", "512", "512,1", "512,1,5,6", "512,1.5,5", "-512,1,5", "512,,5",
    "a,b,c", "0,1,5", "512,0,5", "1e3,1,1",
])
def test_bad_flavor_is_refused(text):
    with pytest.raises(explain.BadInput, match="--flavor"):
        explain.parse_flavor(text)


def test_hint_given_twice_becomes_a_list_in_order():
    hints = explain.parse_hints(["different_host=a", "cidr=/24",
                                 "different_host=b", "different_host=c"])
    assert hints == {"different_host": ["a", "b", "c"], "cidr": "/24"}


def test_values_keep_their_equals_signs_and_json():
    assert explain.parse_hints(['query=["=","$free_ram_mb",1024]']) == {
        "query": '["=","$free_ram_mb",1024]'}
    assert explain.parse_extra_specs(["capabilities:stats.x==1", "a=b=c"]) == {
        "capabilities:stats.x": "=1", "a": "b=c"}


@pytest.mark.parametrize("items", [["novalue"], ["=v"], [" =v"]])
def test_pairs_without_a_key_are_refused(items):
    with pytest.raises(explain.BadInput, match="KEY=VALUE"):
        explain.parse_extra_specs(items)
    with pytest.raises(explain.BadInput, match="--hint"):
        explain.parse_hints(items)


def test_dest_names_never_shadow_conf_options():
    parser = argparse.ArgumentParser()
    explain.add_parser(parser.add_subparsers())
    sub = parser._subparsers._group_actions[0].choices["explain"]
    dests = {a.dest for a in sub._actions if a.dest != "help"}
    assert "name" not in dests
    assert not dests & set(CONF.keys()), dests & set(CONF.keys())


# -- the request ------------------------------------------------------------
def test_request_is_havana_shaped_and_valid():
    spec, fprops = explain.build_request(
        "1024,2,20", ["hw:numa_nodes=1", "capabilities:hypervisor_type=kvm"],
        ["group=g1", "same_host=u1", "same_host=u2"], zone="az2",
        project_id="tenant-a")

    props = spec["instance_properties"]
    assert (props["memory_mb"], props["vcpus"], props["root_gb"]) == (1024, 2, 20)
    assert props["availability_zone"] == "az2"
    assert props["project_id"] == "tenant-a"
    assert spec["instance_uuids"] == [props["uuid"]]
    assert spec["num_instances"] == 1
    for itype in (spec["instance_type"], fprops["instance_type"]):
        assert itype["extra_specs"] == {"hw:numa_nodes": "1",
                                        "capabilities:hypervisor_type": "kvm"}
        assert (itype["memory_mb"], itype["vcpus"], itype["root_gb"]) == (1024, 2, 20)
    assert fprops["scheduler_hints"] == {"group": "g1", "same_host": ["u1", "u2"]}
    json.dumps([spec, fprops])  # goes over the wire as JSON

    parsed = request.parse(spec, fprops)  # the daemon's own validation
    assert (parsed.memory_mb, parsed.vcpus, parsed.root_gb) == (1024, 2, 20)
    assert parsed.availability_zone == "az2"
    assert parsed.extra_specs["hw:numa_nodes"] == "1"
    assert parsed.scheduler_hints["same_host"] == ["u1", "u2"]


def test_request_without_options_has_no_zone_specs_or_hints():
    spec, fprops = explain.build_request("512,1,5")
    assert spec["instance_properties"]["availability_zone"] is None
    assert spec["instance_type"]["extra_specs"] == {}
    assert fprops["scheduler_hints"] == {}
    assert request.parse(spec, fprops).disk_mb == 5 * 1024


def test_each_request_has_a_fresh_uuid():
    a, _ = explain.build_request("512,1,5")
    b, _ = explain.build_request("512,1,5")
    assert a["instance_properties"]["uuid"] != b["instance_properties"]["uuid"]


# -- the command ------------------------------------------------------------
def test_command_sends_what_was_given(cli):
    code, _out, err, sent = cli(
        "--flavor", "2048,4,40", "--extra-spec", "k=v", "--hint", "cidr=/24",
        "--hint", "build_near_host_ip=10.0.0.1", "--az", "az1", "--project", "p1",
        "--timeout", "7")
    assert code == 0, err
    [call] = sent
    spec, fprops = call["request_spec"], call["filter_properties"]
    assert spec["instance_type"]["memory_mb"] == 2048
    assert spec["instance_type"]["extra_specs"] == {"k": "v"}
    assert fprops["scheduler_hints"] == {"cidr": "/24",
                                         "build_near_host_ip": "10.0.0.1"}
    assert spec["instance_properties"]["availability_zone"] == "az1"
    assert spec["instance_properties"]["project_id"] == "p1"
    assert call["timeout"] == 7.0


def test_json_prints_the_reply_unchanged_in_filter_order(cli):
    code, out, err, _ = cli("--flavor", "512,1,5", "--json")
    assert code == 0, err
    assert json.loads(out) == CANNED
    assert list(json.loads(out)["removed"]) == ["RetryFilter", "RamFilter",
                                                "ComputeFilter"]


@pytest.mark.parametrize("flavor", ["512,1", "x,1,1", "512,1,-5", "0,1,1"])
def test_bad_flavor_exits_2_with_one_line_and_no_call(cli, flavor):
    code, out, err, sent = cli("--flavor", flavor)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and "--flavor" in err
    assert sent == []


@pytest.mark.parametrize("args", [
    ("--flavor", "512,1,5", "--hint", "nokey"),
    ("--flavor", "512,1,5", "--extra-spec", "=v"),
    ("--flavor", "512,1,5", "--timeout", "0"),
])
def test_bad_pairs_and_timeout_exit_2(cli, args):
    code, _out, err, sent = cli(*args)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert sent == []


def test_missing_flavor_is_bad_usage(cli):
    assert cli()[0] == 2


def test_no_daemon_exits_1_with_one_line(cli):
    cli.reply["value"] = explain.SchedulerUnavailable(
        "no scheduler answered on topic 'scheduler' within 3 s")
    code, out, err, _ = cli("--flavor", "512,1,5")
    assert code == 1
    assert out == ""
    assert err.strip() == ("ERROR: no scheduler answered on topic 'scheduler' "
                           "within 3 s")


# -- ask_scheduler's error mapping (no broker: fake transport) --------------
@pytest.fixture
def fake_transport(monkeypatch):
    from nova_sched import rpc  # noqa: F401  (registers transport_url)

    CONF.set_override("transport_url", "fake:/")
    from nova_sched.scheduler import rpcapi

    def _raises(exc):
        def _explain(self, ctxt, request_spec, filter_properties, timeout=None):
            _explain.timeout = timeout
            _explain.retry = self.client.retry
            raise exc
        monkeypatch.setattr(rpcapi.SchedulerAPI, "explain", _explain)
        return _explain

    return _raises


def test_timeout_is_reported_as_no_scheduler(fake_transport):
    spec, fprops = explain.build_request("512,1,5")
    call = fake_transport(messaging.MessagingTimeout("timed out"))
    with pytest.raises(explain.SchedulerUnavailable, match="no scheduler answered"):
        explain.ask_scheduler(spec, fprops, 4.0)
    assert call.timeout == 4.0
    assert call.retry == explain.BROKER_RETRIES


def test_remote_error_is_reported_as_refused(fake_transport):
    spec, fprops = explain.build_request("512,1,5")
    fake_transport(messaging.RemoteError(
        "InvalidRequestSpec", "Invalid request: memory_mb must not be negative\nTrace"))
    with pytest.raises(explain.SchedulerUnavailable) as info:
        explain.ask_scheduler(spec, fprops, 1.0)
    assert str(info.value) == ("the scheduler refused the request: "
                               "InvalidRequestSpec: Invalid request: memory_mb "
                               "must not be negative")


def test_refused_broker_connection_fails_fast():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    url = messaging.TransportURL.parse(CONF, f"rabbit://u:secret@127.0.0.1:{port}/")
    with pytest.raises(explain.SchedulerUnavailable) as info:
        explain._check_broker_reachable(url, timeout=1)
    assert f"127.0.0.1:{port}" in str(info.value)
    assert "secret" not in str(info.value)


def test_in_process_transports_need_no_probe():
    explain._check_broker_reachable(messaging.TransportURL.parse(CONF, "fake:/"))
    explain._check_broker_reachable(
        messaging.TransportURL.parse(CONF, "kombu+memory:////"))


# -- the text output ----------------------------------------------------------
def test_text_lists_filters_in_order_with_counts_and_hosts():
    text = explain.format_reply(CANNED, "512 MB RAM")
    lines = text.splitlines()
    assert lines[0] == "Request: 512 MB RAM"
    assert lines[1] == CANNED["reason"]
    start = lines.index("Filters, in the order they ran:")
    header, rule, retry, ram, compute = lines[start + 1:start + 6]
    assert header.split() == ["Filter", "Removed", "Hosts"]
    assert retry.split() == ["RetryFilter", "0"]
    assert ram.split(None, 2) == ["RamFilter", "2", "compute-1, compute-2/node-x"]
    assert compute.split() == ["ComputeFilter", "1", "compute-5"]
    # Counts right-aligned under the header's column.
    col_end = header.index("Removed") + len("Removed")
    assert {ln[col_end - 1] for ln in (retry, ram, compute)} == {"0", "2", "1"}


def test_text_lists_survivors_in_weighed_order_with_contributions():
    lines = explain.format_reply(CANNED).splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("Hosts in weighed"))
    header, rule, first, second = lines[start + 1:start + 5]
    assert header.split() == ["#", "Host", "Node", "Weight", "RAMWeigher",
                              "CPUWeigher", "DiskWeigher"]
    assert first.split() == ["1", "compute-3", "compute-3", "2.5000", "1.0000",
                             "1.0000", "0.5000"]
    assert second.split() == ["2", "compute-10", "node-b", "0.2500", "0.0000",
                              "0.2500", "0.0000"]
    # Aligned: every row as wide as the rule, numbers right-aligned.
    assert len(first) == len(second) == len(rule)
    assert header.endswith("DiskWeigher") and first.endswith("0.5000")


def test_text_says_when_no_host_passes():
    reply = {"hosts": [], "removed": {"RamFilter": [["h1", "h1"]]},
             "reason": "0/1 hosts available: RamFilter removed 1"}
    text = explain.format_reply(reply)
    assert text.splitlines()[0] == reply["reason"]
    assert text.rstrip().endswith("No host passes the filters.")


def test_text_caps_long_host_lists():
    pairs = [[f"h{i}", f"h{i}"] for i in range(120)]
    text = explain.format_reply({"hosts": [], "removed": {"RamFilter": pairs}},
                                max_names=50)
    row = next(ln for ln in text.splitlines() if ln.strip().startswith("RamFilter"))
    assert "h49," in row and "h50," not in row
    assert "70 more; --json lists all" in row
    # Without the daemon's reason line a summary is computed.
    assert text.splitlines()[0] == "0/120 hosts available"


def test_text_command_output(cli):
    code, out, err, _ = cli("--flavor", "512,1,5", "--az", "az1")
    assert code == 0, err
    assert out.splitlines()[0] == ("Request: 512 MB RAM, 1 vCPUs, 5 GB disk; "
                                   "zone az1")
    assert "RamFilter" in out and "compute-10" in out
