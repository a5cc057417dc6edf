"""nova-sched-manage driven through main() against a SQLite file."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from nova_sched.cmd import manage
from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import migration
from nova_sched.db import models

UUID = "9f1c7a52-5d3e-4a8e-9d6b-0c1f7e2a4b11"


@pytest.fixture
def conf_file(tmp_path):
    def write(connection: str) -> str:
        path = tmp_path / "nova-sched.conf"
        path.write_text(
            "[DEFAULT]\nservice_down_time = 60\n"
            f"[database]\nconnection = {connection}\noperation_retries = 0\n"
        )
        return str(path)

    return write


@pytest.fixture
def cli(tmp_path, conf_file, capsys):
    """run(*args) -> (exit code, stdout, stderr) on an unsynced SQLite file."""
    path = conf_file(f"sqlite:///{tmp_path}/manage.sqlite")

    def run(*args: str):
        code = manage.main(["--config-file", path, *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def synced(cli):
    assert cli("db", "sync")[0] == 0
    return cli


def _add(*rows) -> None:
    # main() left the engine on the CLI's database.
    with db_api.session_scope() as session:
        session.add_all(rows)


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_db_sync_is_idempotent_and_version_follows(cli):
    assert cli("db", "version")[:2] == (0, "None\n")
    head = migration.head_revision()
    for _ in range(2):
        code, out, _err = cli("db", "sync")
        assert code == 0 and head in out
    assert cli("db", "version")[:2] == (0, f"{head}\n")


def test_commands_before_db_sync_say_to_run_it(cli):
    code, _out, err = cli("aggregate", "list")
    assert code == 1
    assert "db sync" in _one_error_line(err)


def test_aggregate_commands(synced):
    assert synced("aggregate", "create", "rack1", "--zone", "az1")[0] == 0
    assert synced("aggregate", "create", "ssd")[0] == 0
    assert synced("aggregate", "add-host", "rack1", "h1")[0] == 0
    assert synced("aggregate", "add-host", "rack1", "h2")[0] == 0
    assert synced("aggregate", "add-host", "ssd", "h1")[0] == 0
    assert synced("aggregate", "remove-host", "rack1", "h2")[0] == 0
    assert synced("aggregate", "set-metadata", "ssd", "disk=ssd", "speed=fast")[0] == 0
    assert synced("aggregate", "set-metadata", "ssd", "speed=")[0] == 0

    code, out, _err = synced("aggregate", "list", "--json")

    assert code == 0
    listed = {a["name"]: a for a in json.loads(out)}
    assert listed["rack1"]["availability_zone"] == "az1"
    assert listed["rack1"]["hosts"] == ["h1"]
    assert listed["ssd"]["metadata"] == {"disk": "ssd"}
    assert listed["ssd"]["availability_zone"] is None

    code, out, _err = synced("aggregate", "list")
    header, rule, *rows = out.splitlines()
    assert header.split()[:2] == ["Id", "Name"] and set(rule) <= {"-", " "}
    assert any(r.split()[1:4] == ["rack1", "az1", "h1"] for r in rows), out


@pytest.mark.parametrize(
    "args, message",
    [
        (("aggregate", "add-host", "nope", "h1"), "nope"),
        (("aggregate", "create", "rack1"), "already exists"),
        (("aggregate", "add-host", "rack1", "h1"), "already in aggregate"),
        (("aggregate", "add-host", "rack2", "h1"), "availability zone"),
        (("aggregate", "remove-host", "rack1", "h9"), "h9"),
        (("service", "disable", "nowhere"), "nowhere"),
        (("instance", "show", UUID), UUID),
    ],
)
def test_operation_errors_exit_1_with_one_line(synced, args, message):
    synced("aggregate", "create", "rack1", "--zone", "az1")
    synced("aggregate", "create", "rack2", "--zone", "az2")
    synced("aggregate", "add-host", "rack1", "h1")

    code, out, err = synced(*args)

    assert code == 1
    assert out == ""
    assert message in _one_error_line(err)


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("bogus",),
        ("aggregate",),
        ("aggregate", "set-metadata", "rack1", "no-equals-sign"),
        ("service", "disable"),
        ("host", "list", "--bogus"),
    ],
)
def test_bad_usage_exits_2(cli, args):
    assert cli(*args)[0] == 2


def test_help_exits_0(cli):
    code, out, _err = cli("--help")
    assert code == 0 and "aggregate" in out


def test_missing_config_file_exits_2(capsys, tmp_path):
    code = manage.main(["--config-file", str(tmp_path / "absent.conf"), "db", "sync"])
    assert code == 2
    assert "absent.conf" in _one_error_line(capsys.readouterr().err)


def test_service_disable_and_enable(synced):
    beat = dt.datetime(2030, 1, 1)
    _add(models.Service(host="h1", binary="nova-compute", updated_at=beat))

    code, out, _err = synced("service", "disable", "h1", "--reason", "disk swap")
    assert code == 0 and "h1" in out
    with db_api.session_scope() as session:
        row = session.query(models.Service).one()
        assert (row.disabled, row.disabled_reason, row.updated_at) == (
            True, "disk swap", beat)

    assert synced("service", "enable", "h1")[0] == 0
    with db_api.session_scope() as session:
        row = session.query(models.Service).one()
        assert (row.disabled, row.disabled_reason) == (False, None)


def _node(host, node, **values) -> models.ComputeNode:
    return models.ComputeNode(host=host, hypervisor_hostname=node, **values)


def test_host_list(synced):
    now = db_api.utcnow()
    _add(
        _node("h1", "n1", memory_mb=8192, vcpus=8, local_gb=100,
              claimed_memory_mb=2048, claimed_vcpus=2, claimed_disk_mb=20480,
              claimed_instances=2, memory_mb_used=2560, vcpus_used=3,
              local_gb_used=21, running_vms=3, updated_at=now),
        _node("h2", "n2", memory_mb=4096, vcpus=4, local_gb=50, updated_at=now),
        _node("h3", "n3", memory_mb=1024, deleted=True),
        models.Service(host="h1", binary="nova-compute", updated_at=now),
        models.Service(host="h2", binary="nova-compute", disabled=True,
                       disabled_reason="broken",
                       updated_at=now - dt.timedelta(minutes=10)),
    )

    code, out, _err = synced("host", "list", "--json")

    assert code == 0
    hosts = json.loads(out)
    assert [(h["host"], h["node"]) for h in hosts] == [("h1", "n1"), ("h2", "n2")]
    h1, h2 = hosts
    assert (h1["up"], h1["disabled"]) == (True, False)
    assert (h2["up"], h2["disabled"], h2["disabled_reason"]) == (False, True, "broken")
    assert (h1["memory_mb"], h1["claimed_memory_mb"], h1["memory_mb_used"]) == (
        8192, 2048, 2560)
    assert (h1["vcpus"], h1["claimed_vcpus"], h1["vcpus_used"]) == (8, 2, 3)
    assert (h1["local_gb"], h1["claimed_disk_mb"], h1["local_gb_used"]) == (
        100, 20480, 21)
    assert (h1["instances"], h1["running_vms"]) == (2, 3)

    code, out, _err = synced("host", "list")
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert set(rows) == {"h1", "h2"}
    assert rows["h1"][:5] == ["h1", "n1", "up", "enabled", "2048/8192"]
    assert "20/100" in rows["h1"]
    assert rows["h2"][2:4] == ["down", "disabled"]


def test_instance_show(synced):
    start = dt.datetime(2030, 1, 1, 12, 0, 0)
    _add(
        models.Instance(uuid=UUID, host="h1", node="n1", vm_state="error",
                        task_state=None, memory_mb=512, vcpus=1),
        models.InstanceFault(instance_uuid=UUID, code=500,
                             message="No valid host was found.", created_at=start),
        models.InstanceAction(id=7, action="create", instance_uuid=UUID,
                              request_id="req-1", start_time=start),
        models.InstanceActionEvent(action_id=7, event="schedule", host="sched1",
                                   start_time=start, finish_time=start,
                                   result="Error",
                                   traceback="Traceback\nValueError: boom"),
    )

    code, out, _err = synced("instance", "show", UUID, "--json")

    assert code == 0
    inst = json.loads(out)
    assert (inst["host"], inst["node"], inst["vm_state"], inst["task_state"]) == (
        "h1", "n1", "error", None)
    assert [f["message"] for f in inst["faults"]] == ["No valid host was found."]
    [action] = inst["actions"]
    assert (action["action"], action["request_id"]) == ("create", "req-1")
    [event] = action["events"]
    assert (event["event"], event["result"], event["host"]) == (
        "schedule", "Error", "sched1")
    assert event["start_time"] == start.isoformat()

    code, out, _err = synced("instance", "show", UUID)
    assert code == 0
    assert "No valid host was found." in out
    assert "ValueError: boom" in out
    assert any(line.split()[:2] == ["vm_state", "error"] for line in out.splitlines())


@pytest.mark.parametrize(
    "url, code",
    [
        ("mysql+pymysql://nova:s3cretpw@127.0.0.1:1/nova", 1),
        ("postgresql+nosuchdriver://nova:s3cretpw@db/nova", 2),
        ("postgresql+psycopg2://nova:s3cretpw@db:notaport/nova", 2),
    ],
)
def test_database_password_is_never_printed(conf_file, capsys, url, code):
    assert manage.main(["--config-file", conf_file(url), "host", "list"]) == code
    out, err = capsys.readouterr()
    assert _one_error_line(err).startswith("ERROR:")
    assert "s3cretpw" not in out + err


def test_redact_hides_passwords_in_urls():
    text = manage._redact("failed: mysql+pymysql://nova:pa55@db/nova down")
    assert "pa55" not in text and "nova:***@db" in text


def test_global_conf_is_left_parseable(synced):
    # No sub-command stays registered to break the next parse in-process.
    # Parsing would exit 2 ("required: category") if one did.
    CONF([], project="nova-sched", default_config_files=[])
    assert "category" not in CONF
