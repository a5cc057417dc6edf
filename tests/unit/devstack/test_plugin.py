"""The devstack plugin (devstack/settings, devstack/plugin.sh), run as devstack runs it.

Each test writes a bash script that sets the variables stack.sh provides,
defines devstack's functions as stubs, sources devstack/settings and then
``source devstack/plugin.sh <mode> <phase>`` for each phase, under
``set -o errexit`` as stack.sh does. Every stub, and every fake program the
plugin executes (nova-sched-manage, ...), appends one tab-separated line to
the file named by $CALLS. The tests parse that log and check what a devstack
user relies on: the configuration written (file, section, key, value of each
iniset), what is installed, the schema sync, the processes started with their
command lines, the processes stopped on unstack, the files removed on clean,
and that the phases with nothing to do (and unknown ones) do nothing.

Everything lives under pytest's tmp_path: the configuration directory is
overridden the way a local.conf would, so nothing touches /etc or /opt.

With NOVA_SCHED_REPLACE_NOVA_SCHEDULER=True the plugin reads nova's own
configuration: each run has a $NOVA_CONF (as lib/nova defines it before
plugin settings are loaded), written by the test when it gives one.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import pwd
import re
import shlex
import stat
import subprocess
import tomllib

import pytest
from oslo_config import cfg

from nova_sched.cmd import fake_compute

ROOT = pathlib.Path(__file__).resolve().parents[3]
SETTINGS = ROOT / "devstack" / "settings"
PLUGIN = ROOT / "devstack" / "plugin.sh"
SAMPLE = ROOT / "etc" / "nova-sched.conf.sample"

SERVICE_HOST = "192.0.2.10"
RABBIT_URL = f"rabbit://stackrabbit:secretrabbit@{SERVICE_HOST}:5672/"
DB_URLS = {
    "mysql": f"mysql+pymysql://root:secretdb@{SERVICE_HOST}/nova_sched?charset=utf8",
    "postgresql": (
        f"postgresql://root:secretdb@{SERVICE_HOST}/nova_sched?client_encoding=utf8"
    ),
}
DEFAULT_FILTERS = (
    "RetryFilter,AvailabilityZoneFilter,RamFilter,CoreFilter,DiskFilter,"
    "ComputeFilter,ComputeCapabilitiesFilter,ImagePropertiesFilter,"
    "ServerGroupAntiAffinityFilter,ServerGroupAffinityFilter"
)

# Calls that change the machine. A phase with nothing to do makes none.
EFFECTS = {
    "configure_placement_nova_compute",
    "die",
    "disable_service",
    "echo_summary",
    "exec",
    "iniset",
    "iniset_rpc_backend",
    "pip_install",
    "recreate_database",
    "run_process",
    "setup_develop",
    "setup_install",
    "setup_logging",
    "stop_process",
    "sudo",
    "systemctl",
}

# The stubs behave like devstack's functions as far as the plugin can tell
# (same arguments, same output), but only record what they were asked.
STUBS = r"""
_log() { local IFS=$'\t'; printf '%s\n' "$*" >> "$CALLS"; }

# An unstubbed devstack function would otherwise be a silent "command not
# found" that errexit turns into a failure with no hint of the cause.
command_not_found_handle() { _log UNSTUBBED "$@"; return 127; }

function define_plugin { _log define_plugin "$@"; }
function is_service_enabled {
    local s
    for s in "$@"; do
        [[ ",$ENABLED_SERVICES," == *",$s,"* ]] && return 0
    done
    return 1
}
# Like devstack: a disable_service in local.conf wins over a plugin's
# enable_service.
function enable_service {
    local s
    _log enable_service "$@"
    for s in "$@"; do
        [[ ",$DISABLED_SERVICES," == *",$s,"* ]] && continue
        is_service_enabled "$s" || ENABLED_SERVICES+=",$s"
    done
}
# Like devstack: removes the services from ENABLED_SERVICES and remembers
# them in DISABLED_SERVICES.
function disable_service {
    local s
    _log disable_service "$@"
    for s in "$@"; do
        DISABLED_SERVICES+=",$s"
        ENABLED_SERVICES=$(echo ",$ENABLED_SERVICES," | sed -e "s/,$s,/,/g" \
            -e 's/^,//' -e 's/,$//')
    done
}
# devstack's, as it is.
function trueorfalse {
    local default=$1
    local testval=${!2:-}
    case "$testval" in
        "1" | [yY]es | "YES" | [tT]rue | "TRUE" ) echo "True" ;;
        "0" | [nN]o | "NO" | [fF]alse | "FALSE" ) echo "False" ;;
        * ) echo "$default" ;;
    esac
}
function die { local line=$1; shift; _log die "$*"; echo "ERROR: $*" >&2; exit 1; }
function get_python_exec_prefix { echo "$FAKE_BIN"; }
function echo_summary { _log echo_summary "$@"; }
function pip_install { _log pip_install "$@"; }
function setup_develop { _log setup_develop "$@"; }
function setup_install { _log setup_install "$@"; }
function iniset { _log iniset "$@"; }
function iniset_rpc_backend {
    _log iniset_rpc_backend "$@"
    iniset "$2" "${3:-DEFAULT}" transport_url \
        "rabbit://stackrabbit:secretrabbit@$SERVICE_HOST:5672/"
}
function recreate_database { _log recreate_database "$@"; }
function database_connection_url {
    _log database_connection_url "$@"
    case "$DATABASE_TYPE" in
        mysql) echo "mysql+pymysql://root:secretdb@$DATABASE_HOST/$1?charset=utf8" ;;
        postgresql) echo "postgresql://root:secretdb@$DATABASE_HOST/$1?client_encoding=utf8" ;;
    esac
}
function setup_logging { _log setup_logging "$@"; }
function configure_placement_nova_compute {
    _log configure_placement_nova_compute "$@";
}
function run_process { _log run_process "$@"; }
# $SYSTEMCTL, as stackrc sets it ("sudo systemctl" or "systemctl --user"):
# the units named in $FAKE_ENABLED_UNITS are enabled. A query is not an
# effect; stop and disable are.
SYSTEMCTL="fake_systemctl --user"
function fake_systemctl {
    [[ "$1" == "--user" ]] || { _log UNSTUBBED systemctl "$@"; return 127; }
    shift
    if [[ "$1" == "is-enabled" ]]; then
        _log systemctl-query "$@"
        [[ ",$FAKE_ENABLED_UNITS," == *",$2,"* ]]
        return
    fi
    _log systemctl "$@"
}
function stop_process { _log stop_process "$@"; }
# Runs the command for real (as the invoking user): the paths are all
# under the test's temporary directory.
function sudo { _log sudo "$@"; "$@"; }
"""

# What the plugin finds on the console-script path: records its arguments.
FAKE_PROGRAM = """#!/bin/bash
{ printf 'exec\\t%s' "${0##*/}"; printf '\\t%s' "$@"; printf '\\n'; } >> "$CALLS"
"""


@dataclasses.dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    # phase label ("settings", "stack install", ...) -> calls in order.
    phases: dict[str, list[tuple[str, ...]]]
    conf_dir: pathlib.Path
    conf: pathlib.Path
    state: pathlib.Path
    data_dir: pathlib.Path
    bin_dir: pathlib.Path

    def calls(self, phase: str, name: str | None = None) -> list[tuple[str, ...]]:
        return [c for c in self.phases[phase] if name is None or c[0] == name]

    def effects(self, phase: str) -> list[tuple[str, ...]]:
        return [c for c in self.phases[phase] if c[0] in EFFECTS]

    def inisets(self, phase: str) -> dict[tuple[str, str], str]:
        written = {}
        for _, path, section, key, value in self.calls(phase, "iniset"):
            assert path == str(self.conf), f"iniset on {path}, not {self.conf}"
            written[(section, key)] = value
        return written


def run_devstack(
    tmp_path: pathlib.Path,
    *phases: tuple[str, ...],
    local_conf: str = "",
    database_type: str = "mysql",
    override_conf_dir: bool = True,
    epilogue: str = "",
    nova_conf: str | None = None,
) -> Run:
    """Source settings, then plugin.sh once per phase, in one bash process.

    ``local_conf`` is bash run before settings, as devstack applies a
    local.conf's [[local|localrc]] section before loading plugin settings.
    ``nova_conf`` is the text of $NOVA_CONF; None: there is no such file.
    """
    dest = tmp_path / "opt" / "stack"
    data_dir = dest / "data"
    bin_dir = tmp_path / "venv" / "bin"
    conf_dir = tmp_path / "etc" / "nova-sched"
    calls = tmp_path / "calls.log"
    data_dir.mkdir(parents=True, exist_ok=True)
    bin_dir.mkdir(parents=True, exist_ok=True)
    for program in ("nova-sched", "nova-sched-manage", "nova-sched-fake-compute"):
        path = bin_dir / program
        path.write_text(FAKE_PROGRAM)
        path.chmod(0o755)
    calls.write_text("")
    nova_conf_path = tmp_path / "nova" / "nova.conf"
    if nova_conf is not None:
        nova_conf_path.parent.mkdir(exist_ok=True)
        nova_conf_path.write_text(nova_conf)

    lines = [
        "set -o errexit",
        f"DEST={shlex.quote(str(dest))}",
        f"DATA_DIR={shlex.quote(str(data_dir))}",
        f"FAKE_BIN={shlex.quote(str(bin_dir))}",
        f"SERVICE_HOST={SERVICE_HOST}",
        "DATABASE_HOST=$SERVICE_HOST",
        "STACK_USER=$(id -un)",
        "ENABLE_DEBUG_LOG_LEVEL=True",
        f"DATABASE_TYPE={shlex.quote(database_type)}",
        "ENABLED_SERVICES=key,rabbit" + (f",{database_type}" if database_type else ""),
        "DISABLED_SERVICES=",
        "FAKE_ENABLED_UNITS=",
        # Set by lib/nova, which stack.sh sources before plugin settings.
        f"NOVA_CONF={shlex.quote(str(nova_conf_path))}",
        "NOVA_API_DB=nova_api",
        STUBS,
    ]
    if override_conf_dir:
        lines.append(f"NOVA_SCHED_CONF_DIR={shlex.quote(str(conf_dir))}")
    lines += [local_conf, "_log phase settings", f"source {shlex.quote(str(SETTINGS))}"]
    for args in phases:
        quoted = " ".join(shlex.quote(a) for a in args)
        lines.append(f"_log phase {quoted}")
        lines.append(f"source {shlex.quote(str(PLUGIN))} {quoted}")
    lines.append(epilogue)
    script = tmp_path / "devstack-run.sh"
    script.write_text("\n".join(lines) + "\n")

    env = {k: v for k, v in os.environ.items() if not k.startswith("NOVA_SCHED")}
    env["CALLS"] = str(calls)
    proc = subprocess.run(
        ["bash", str(script)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    parsed: dict[str, list[tuple[str, ...]]] = {}
    current = None
    for line in calls.read_text().splitlines():
        fields = tuple(line.split("\t"))
        if fields[0] == "phase":
            current = " ".join(fields[1:])
            parsed[current] = []
        else:
            parsed[current].append(fields)
    unstubbed = [c for calls_ in parsed.values() for c in calls_ if c[0] == "UNSTUBBED"]
    assert not unstubbed, f"plugin called functions the test does not stub: {unstubbed}"
    return Run(
        returncode=proc.returncode,
        stdout=proc.stdout,
        stderr=proc.stderr,
        phases=parsed,
        conf_dir=conf_dir,
        conf=conf_dir / "nova-sched.conf",
        state=data_dir / "nova-sched",
        data_dir=data_dir,
        bin_dir=bin_dir,
    )


def ok(run: Run) -> Run:
    assert run.returncode == 0, f"bash failed ({run.returncode}):\n{run.stderr[-3000:]}"
    return run


def tree(path: pathlib.Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


# -- settings ---------------------------------------------------------------


def test_settings_defaults(tmp_path):
    run = ok(
        run_devstack(
            tmp_path,
            override_conf_dir=False,
            epilogue='printf "%s\\n" "$NOVA_SCHED_DIR" "$NOVA_SCHED_CONF" '
            '"$NOVA_SCHED_STATE_PATH" "$ENABLED_SERVICES"',
        )
    )
    src, conf, state, enabled = run.stdout.splitlines()
    # devstack clones the plugin to $DEST/nova-sched; settings must find the
    # checkout it was sourced from wherever that is.
    assert pathlib.Path(src) == ROOT
    assert conf == "/etc/nova-sched/nova-sched.conf"
    assert state == f"{run.data_dir}/nova-sched"
    assert run.calls("settings", "define_plugin") == [("define_plugin", "nova-sched")]
    assert enabled.split(",") == ["key", "rabbit", "mysql", "nova-sched"]


def test_settings_enables_one_service_per_fake_compute(tmp_path):
    run = ok(
        run_devstack(
            tmp_path,
            local_conf="NOVA_SCHED_FAKE_COMPUTES=3",
            epilogue='echo "$ENABLED_SERVICES"',
        )
    )
    ours = run.stdout.strip().split(",")[3:]
    assert ours == [
        "nova-sched",
        "nova-sched-fake-1",
        "nova-sched-fake-2",
        "nova-sched-fake-3",
    ]
    # devstack's is_service_enabled reports nova itself as enabled when any
    # enabled service contains "n-": stack.sh would then deploy nova.
    assert not any("n-" in name for name in ours)


# -- stack install ------------------------------------------------------------


@pytest.mark.parametrize(
    "database_type, target",
    [
        ("mysql", f"{ROOT}[mysql]"),
        ("postgresql", f"{ROOT}[postgresql]"),
        ("", str(ROOT)),
    ],
)
def test_install_pip_installs_the_checkout_with_the_database_driver(
    tmp_path, database_type, target
):
    run = ok(run_devstack(tmp_path, ("stack", "install"), database_type=database_type))
    assert run.calls("stack install", "pip_install") == [("pip_install", "-e", target)]
    effects = [c[0] for c in run.effects("stack install")]
    assert effects == ["echo_summary", "pip_install"]
    assert not run.conf_dir.exists()


def test_install_extras_exist_in_the_package():
    # A misspelt extra only makes pip warn, and the daemon then fails at
    # start-up without its database driver.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    plugin = PLUGIN.read_text()
    used = set(re.findall(r"^\s*(\w+)\) echo (\w+) ;;", plugin, re.M))
    assert used == {("mysql", "mysql"), ("postgresql", "postgresql")}
    assert {extra for _, extra in used} <= set(extras)


# -- stack post-config ----------------------------------------------------------


def test_post_config_writes_the_configuration_and_syncs_the_database(tmp_path):
    run = ok(run_devstack(tmp_path, ("stack", "post-config")))
    conf = str(run.conf)
    assert run.inisets("stack post-config") == _own_settings(run)
    phase = "stack post-config"
    assert run.calls(phase, "iniset_rpc_backend") == [
        ("iniset_rpc_backend", "nova-sched", conf)
    ]
    assert run.calls(phase, "recreate_database") == [("recreate_database", "nova_sched")]
    assert run.calls(phase, "database_connection_url") == [
        ("database_connection_url", "nova_sched")
    ]
    assert run.calls(phase, "setup_logging") == [("setup_logging", conf)]

    # The daemon runs as the stack user and reads its file; the file holds
    # the database password, so others may not.
    assert run.conf_dir.is_dir() and run.state.is_dir()
    assert stat.S_IMODE(run.conf.stat().st_mode) == 0o640
    user = pwd.getpwuid(os.getuid()).pw_name
    assert run.calls(phase, "sudo") == [
        ("sudo", "install", "-d", "-o", user, "-m", "755", str(run.conf_dir))
    ]

    sync = ("exec", "nova-sched-manage", "--config-file", conf, "db", "sync")
    assert run.calls(phase, "exec") == [sync]
    calls = run.phases[phase]
    # The schema is synced into the database the file names, once it exists.
    assert calls.index(sync) > max(
        calls.index(c) for c in calls if c[0] in ("iniset", "recreate_database")
    )


def _documented_options() -> set[tuple[str, str]]:
    """(section, option) of every option the config sample lists."""
    documented = set()
    section = None
    for line in SAMPLE.read_text().splitlines():
        if m := re.match(r"^\[(\w+)\]$", line):
            section = m.group(1)
        elif m := re.match(r"^#(\w+) =", line):
            documented.add((section, m.group(1)))
    return documented


def test_post_config_keys_are_options_of_nova_sched(tmp_path):
    # The sample lists every option nova-sched reads (its own, oslo.log's,
    # oslo.messaging's): a key missing from it is a typo nova-sched ignores.
    run = ok(run_devstack(tmp_path, ("stack", "post-config")))
    documented = _documented_options()
    written = set(run.inisets("stack post-config"))
    assert written - documented == set()


def test_post_config_without_a_database_service_uses_sqlite_in_state_path(tmp_path):
    run = ok(run_devstack(tmp_path, ("stack", "post-config"), database_type=""))
    phase = "stack post-config"
    assert run.inisets(phase)[("database", "connection")] == (
        f"sqlite:///{run.state}/nova_sched.sqlite"
    )
    assert run.calls(phase, "recreate_database") == []
    assert run.calls(phase, "database_connection_url") == []
    assert run.calls(phase, "exec") == [
        ("exec", "nova-sched-manage", "--config-file", str(run.conf), "db", "sync")
    ]


def test_post_config_postgresql_connection(tmp_path):
    run = ok(run_devstack(tmp_path, ("stack", "post-config"), database_type="postgresql"))
    assert run.inisets("stack post-config")[("database", "connection")] == (
        DB_URLS["postgresql"]
    )


def test_post_config_takes_local_conf_overrides(tmp_path):
    local_conf = "\n".join(
        [
            "ENABLE_DEBUG_LOG_LEVEL=False",
            "NOVA_SCHED_DRIVER=chance_scheduler",
            "NOVA_SCHED_WORKERS=4",
            "NOVA_SCHED_MAX_ATTEMPTS=5",
            "NOVA_SCHED_ENABLED_FILTERS=RetryFilter,RamFilter",
            f"NOVA_SCHED_STATE_PATH={shlex.quote(str(tmp_path / 'state'))}",
        ]
    )
    run = ok(
        run_devstack(
            tmp_path, ("stack", "post-config"), local_conf=local_conf, database_type=""
        )
    )
    written = run.inisets("stack post-config")
    assert written[("DEFAULT", "debug")] == "False"
    assert written[("scheduler", "driver")] == "chance_scheduler"
    assert written[("scheduler", "workers")] == "4"
    assert written[("scheduler", "max_attempts")] == "5"
    assert written[("filter_scheduler", "enabled_filters")] == "RetryFilter,RamFilter"
    assert written[("DEFAULT", "state_path")] == str(tmp_path / "state")
    assert written[("database", "connection")] == (
        f"sqlite:///{tmp_path}/state/nova_sched.sqlite"
    )
    assert (tmp_path / "state").is_dir()


def test_post_config_drops_options_left_by_a_previous_stack(tmp_path):
    # iniset only adds or replaces keys: after a re-stack with a changed
    # local.conf a stale key would otherwise stay in effect.
    conf_dir = tmp_path / "etc" / "nova-sched"
    conf_dir.mkdir(parents=True)
    (conf_dir / "nova-sched.conf").write_text("[scheduler]\nrequest_threads = 64\n")
    run = ok(run_devstack(tmp_path, ("stack", "post-config")))
    assert "request_threads" not in run.conf.read_text()


# -- stack extra --------------------------------------------------------------


def _command(call: tuple[str, ...]) -> list[str]:
    name, service, command = call
    assert name == "run_process"
    return shlex.split(command)


def test_extra_starts_the_daemon_only_by_default(tmp_path):
    run = ok(run_devstack(tmp_path, ("stack", "extra")))
    assert run.calls("stack extra", "run_process") == [
        (
            "run_process",
            "nova-sched",
            f"{run.bin_dir}/nova-sched --config-file {run.conf}",
        )
    ]
    assert [c[0] for c in run.effects("stack extra")] == ["echo_summary", "run_process"]


def test_extra_starts_the_fake_computes(tmp_path):
    run = ok(
        run_devstack(
            tmp_path,
            ("stack", "extra"),
            local_conf="NOVA_SCHED_FAKE_COMPUTES=2\nNOVA_SCHED_FAKE_FAIL_BUILDS=0.25\n"
            "NOVA_SCHED_FAKE_VCPUS=8",
        )
    )
    started = run.calls("stack extra", "run_process")
    assert [c[1] for c in started] == ["nova-sched", "nova-sched-fake-1", "nova-sched-fake-2"]
    for i, call in enumerate(started[1:], start=1):
        argv = _command(call)
        assert argv[0] == f"{run.bin_dir}/nova-sched-fake-compute"
        assert argv[1:] == [
            "--config-file", str(run.conf),
            "--host", f"fake-compute-{i}",
            "--vcpus", "8",
            "--memory-mb", "65536",
            "--local-gb", "1000",
            "--fail-builds", "0.25",
        ]  # fmt: skip


def test_extra_fake_compute_command_line_parses(tmp_path):
    # Parsed by the real program's options: a misspelt flag would make every
    # fake compute exit at start-up.
    run = ok(
        run_devstack(
            tmp_path,
            ("stack", "extra"),
            local_conf="NOVA_SCHED_FAKE_COMPUTES=1\nNOVA_SCHED_FAKE_FAIL_BUILDS=0.5",
        )
    )
    run.conf_dir.mkdir(parents=True)
    run.conf.write_text("")
    argv = _command(run.calls("stack extra", "run_process")[1])
    conf = cfg.ConfigOpts()
    conf.register_cli_opts(fake_compute.cli_opts)
    conf(argv[1:], project="nova-sched", default_config_files=[])
    assert conf.fake_host == "fake-compute-1"
    assert (conf.vcpus, conf.memory_mb, conf.local_gb) == (16, 65536, 1000)
    assert conf.fail_builds == 0.5
    assert conf.config_file == [str(run.conf)]


# -- unstack, clean -------------------------------------------------------------


def test_unstack_stops_every_process_and_touches_nothing_else(tmp_path):
    stacked = ok(
        run_devstack(
            tmp_path,
            ("stack", "post-config"),
            local_conf="NOVA_SCHED_FAKE_COMPUTES=2",
            database_type="",
        )
    )
    before = tree(tmp_path / "etc") | tree(stacked.data_dir)
    run = ok(run_devstack(tmp_path, ("unstack",), local_conf="NOVA_SCHED_FAKE_COMPUTES=2"))
    assert run.effects("unstack") == [
        ("stop_process", "nova-sched-fake-1"),
        ("stop_process", "nova-sched-fake-2"),
        ("stop_process", "nova-sched"),
    ]
    assert tree(tmp_path / "etc") | tree(run.data_dir) == before


def test_clean_removes_configuration_and_state(tmp_path):
    ok(run_devstack(tmp_path, ("stack", "post-config"), database_type=""))
    state = tmp_path / "opt" / "stack" / "data" / "nova-sched"
    (state / "nova_sched.sqlite").write_text("db")
    other = tmp_path / "opt" / "stack" / "data" / "glance"
    other.mkdir()
    run = ok(run_devstack(tmp_path, ("clean",)))
    # clean.sh runs after "unstack.sh --all" has stopped the database
    # server, whose data devstack's cleanup_database then removes: dropping
    # the MySQL/PostgreSQL database here is neither needed nor possible.
    assert run.effects("clean") == [
        ("sudo", "rm", "-rf", str(run.conf_dir), str(run.state)),
    ]
    assert not run.conf_dir.exists()
    assert not run.state.exists()
    assert other.is_dir()


# -- phases with nothing to do --------------------------------------------------


@pytest.mark.parametrize(
    "phase",
    [
        ("stack", "pre-install"),
        ("stack", "test-config"),
        ("stack", "post-extra"),
        ("stack", "no-such-phase"),
        ("no-such-mode",),
        ("source",),
    ],
    ids=" ".join,
)
def test_phase_without_work_does_nothing(tmp_path, phase):
    run = ok(run_devstack(tmp_path, phase))
    assert run.effects(" ".join(phase)) == []
    assert not (tmp_path / "etc").exists()
    assert tree(run.data_dir) == set()


@pytest.mark.parametrize(
    "phase",
    [
        ("stack", "install"),
        ("stack", "post-config"),
        ("stack", "extra"),
        ("unstack",),
        ("clean",),
    ],
    ids=" ".join,
)
def test_disabled_service_does_nothing(tmp_path, phase):
    run = ok(
        run_devstack(
            tmp_path,
            phase,
            local_conf="DISABLED_SERVICES=nova-sched\nNOVA_SCHED_FAKE_COMPUTES=1",
        )
    )
    assert run.effects(" ".join(phase)) == []
    assert not (tmp_path / "etc").exists()


# -- a whole stack.sh run -------------------------------------------------------


@pytest.mark.parametrize("xtrace", ["-o", "+o"])
def test_stack_phases_in_order_in_one_shell(tmp_path, xtrace):
    phases = [
        ("stack", "pre-install"),
        ("stack", "install"),
        ("stack", "post-config"),
        ("stack", "extra"),
        ("stack", "test-config"),
    ]
    run = ok(
        run_devstack(
            tmp_path,
            *phases,
            # stack.sh runs with xtrace on, unstack.sh without: the plugin
            # traces itself and must leave the caller's setting as it was.
            local_conf=f"set {xtrace} xtrace",
            epilogue="set +o | grep xtrace",
        )
    )
    assert run.stdout.strip() == f"set {xtrace} xtrace"
    work = {
        " ".join(p): [c[0] for c in run.effects(" ".join(p)) if c[0] != "echo_summary"]
        for p in phases
    }
    assert work["stack pre-install"] == []
    assert work["stack install"] == ["pip_install"]
    assert work["stack post-config"][-1] == "exec"
    assert work["stack extra"] == ["run_process"]
    assert work["stack test-config"] == []


# -- in place of nova-scheduler (NOVA_SCHED_REPLACE_NOVA_SCHEDULER) -----------

REPLACE = "NOVA_SCHED_REPLACE_NOVA_SCHEDULER=True"
# An all-in-one devstack's nova services, n-sch among them.
NOVA_SERVICES = 'ENABLED_SERVICES+=",n-api,n-cond,n-sch,n-cpu,placement-api"'

NOVA_TRANSPORT_URL = f"rabbit://stackrabbit:novarabbit@{SERVICE_HOST}:5672/nova"
NOVA_API_DB_URL = f"mysql+pymysql://root:novadbsecret@{SERVICE_HOST}/nova_api?charset=utf8"
# A glob character and a double blank: copied as written, not as devstack's
# iniget would echo them (the test runs where a file "placement" exists).
PLACEMENT_PASSWORD = "pl*ment  Secret9"
# nova's [placement] as devstack's configure_placement_nova_compute writes
# it, plus what an operator may add: every key is copied, whatever it is.
NOVA_PLACEMENT = {
    "auth_type": "password",
    "interface": "public",
    "auth_url": f"http://{SERVICE_HOST}/identity",
    "username": "nova",
    "password": PLACEMENT_PASSWORD,
    "user_domain_name": "Default",
    "project_name": "service",
    "project_domain_name": "Default",
    "region_name": "RegionOne",
    "valid_interfaces": "internal,public",
}
NOVA_CONF = f"""[DEFAULT]
debug = True
transport_url = {NOVA_TRANSPORT_URL}
my_ip = {SERVICE_HOST}

[filter_scheduler]
enabled_filters = ComputeFilter,ImagePropertiesFilter

[database]
connection = mysql+pymysql://root:novadbsecret@{SERVICE_HOST}/nova_cell0?charset=utf8

[api_database]
connection = {NOVA_API_DB_URL}

[placement]
""" + "".join(f"{k} = {v}\n" for k, v in NOVA_PLACEMENT.items()) + """
[oslo_messaging_notifications]
driver = messagingv2
"""

# What configure_nova_sched writes without the setting (and still writes
# with it; some of it then replaced by nova's values).
OWN_SETTINGS = {
    ("DEFAULT", "debug"): "True",
    ("DEFAULT", "state_path"): None,  # the run's state path
    ("DEFAULT", "transport_url"): RABBIT_URL,
    ("database", "connection"): DB_URLS["mysql"],
    ("scheduler", "driver"): "filter_scheduler",
    ("scheduler", "workers"): "1",
    ("scheduler", "max_attempts"): "3",
    ("filter_scheduler", "enabled_filters"): DEFAULT_FILTERS,
}


def _own_settings(run: Run) -> dict[tuple[str, str], str]:
    return {**OWN_SETTINGS, ("DEFAULT", "state_path"): str(run.state)}


def _services_with(tmp_path, setting: str) -> tuple[Run, list[str], list[str]]:
    """devstack's enabled and disabled services after the settings, with
    ``setting`` in local.conf."""
    run = ok(
        run_devstack(
            tmp_path,
            local_conf=f"{NOVA_SERVICES}\n{setting}",
            epilogue='printf "%s\\n" "$ENABLED_SERVICES" "$DISABLED_SERVICES"',
        )
    )
    enabled, disabled = run.stdout.splitlines()
    return run, enabled.split(","), [s for s in disabled.split(",") if s]


@pytest.mark.parametrize("value", ["True", "true", "yes", "1"])
def test_replace_settings_disable_nova_scheduler(tmp_path, value):
    _run, enabled, disabled = _services_with(
        tmp_path, f"NOVA_SCHED_REPLACE_NOVA_SCHEDULER={value}")
    assert "n-sch" not in enabled and "n-sch" in disabled
    assert "nova-sched" in enabled
    # The rest of nova still runs; nova-sched is its scheduler.
    assert {"n-api", "n-cond", "n-cpu", "placement-api"} <= set(enabled)


@pytest.mark.parametrize("value", [None, "False", "no", "0", "bogus"])
def test_without_replace_settings_leave_nova_scheduler_alone(tmp_path, value):
    setting = "" if value is None else f"NOVA_SCHED_REPLACE_NOVA_SCHEDULER={value}"
    run, enabled, disabled = _services_with(tmp_path, setting)
    assert "n-sch" in enabled and disabled == []
    assert run.calls("settings", "disable_service") == []


def test_replace_post_config_configures_nova_sched_from_nova_conf(tmp_path):
    (tmp_path / "placement").write_text("")
    run = ok(
        run_devstack(
            tmp_path,
            ("stack", "post-config"),
            local_conf=f"{NOVA_SERVICES}\n{REPLACE}",
            nova_conf=NOVA_CONF,
        )
    )
    phase = "stack post-config"
    assert run.inisets(phase) == {
        **_own_settings(run),
        # nova's broker and exchange, where its conductor calls the scheduler.
        ("DEFAULT", "transport_url"): NOVA_TRANSPORT_URL,
        ("DEFAULT", "control_exchange"): "nova",
        ("scheduler", "host_source"): "nova_cells",
        ("scheduler", "claims"): "placement",
        ("nova_cells", "api_database_connection"): NOVA_API_DB_URL,
        ("nova_cells", "refresh_interval"): "5",
        **{("placement", k): v for k, v in NOVA_PLACEMENT.items()},
    }
    # nova-sched's own tables stay in its own database, synced as before.
    assert run.calls(phase, "recreate_database") == [("recreate_database", "nova_sched")]
    assert run.calls(phase, "database_connection_url") == [
        ("database_connection_url", "nova_sched")
    ]
    assert run.calls(phase, "configure_placement_nova_compute") == []
    sync = ("exec", "nova-sched-manage", "--config-file", str(run.conf), "db", "sync")
    calls = run.phases[phase]
    assert calls[-1] == sync
    assert calls.index(sync) > max(i for i, c in enumerate(calls) if c[0] == "iniset")
    # The daemon reads the copied passwords: the file stays private.
    assert stat.S_IMODE(run.conf.stat().st_mode) == 0o640


def test_replace_post_config_takes_local_conf_refresh_interval(tmp_path):
    run = ok(
        run_devstack(
            tmp_path,
            ("stack", "post-config"),
            local_conf=f"{REPLACE}\nNOVA_SCHED_NOVA_CELLS_REFRESH_INTERVAL=2",
            nova_conf=NOVA_CONF,
        )
    )
    assert run.inisets("stack post-config")[("nova_cells", "refresh_interval")] == "2"


@pytest.mark.parametrize(
    "nova_conf",
    [None, "[DEFAULT]\ndebug = True\n\n[placement]\n# nothing set\n"],
    ids=["no nova.conf", "nova.conf without them"],
)
def test_replace_post_config_without_nova_values_uses_devstack_ones(tmp_path, nova_conf):
    # nova's API services (and so nova.conf's [api_database]) on another
    # node, and no n-cpu here: with n-sch disabled, stack.sh writes no
    # [placement] into nova.conf. devstack's own values for the same things.
    run = ok(
        run_devstack(
            tmp_path, ("stack", "post-config"), local_conf=REPLACE, nova_conf=nova_conf
        )
    )
    phase = "stack post-config"
    written = run.inisets(phase)
    assert written[("DEFAULT", "transport_url")] == RABBIT_URL
    assert written[("nova_cells", "api_database_connection")] == (
        f"mysql+pymysql://root:secretdb@{SERVICE_HOST}/nova_api?charset=utf8"
    )
    assert not [key for key in written if key[0] == "placement"]
    assert run.calls(phase, "configure_placement_nova_compute") == [
        ("configure_placement_nova_compute", str(run.conf))
    ]
    assert run.calls(phase, "database_connection_url") == [
        ("database_connection_url", "nova_sched"),
        ("database_connection_url", "nova_api"),
    ]


def test_replace_post_config_without_any_api_database_refuses(tmp_path):
    run = run_devstack(
        tmp_path,
        ("stack", "post-config"),
        local_conf=REPLACE,
        database_type="",
        nova_conf="[DEFAULT]\ndebug = True\n",
    )
    assert run.returncode != 0
    assert "[api_database] connection" in run.stderr
    assert run.calls("stack post-config", "exec") == []


def test_replace_keys_are_options_of_nova_sched(tmp_path):
    # As test_post_config_keys_are_options_of_nova_sched. [placement] is left
    # out: it is nova's section as it is, which can hold options nobody reads
    # (devstack writes keystoneauth's deprecated "interface", which nova no
    # longer registers either), and its auth plugin's options depend on the
    # plugin.
    if not re.search(r"^\[nova_cells\]$", SAMPLE.read_text(), re.M):
        pytest.skip("etc/nova-sched.conf.sample does not document [nova_cells] yet")
    run = ok(
        run_devstack(
            tmp_path, ("stack", "post-config"), local_conf=REPLACE, nova_conf=NOVA_CONF
        )
    )
    documented = _documented_options()
    written = {k for k in run.inisets("stack post-config") if k[0] != "placement"}
    assert written - documented == set()


@pytest.mark.parametrize("phases", [
    [("stack", "post-config")],
    [("stack", "pre-install"), ("stack", "install"), ("stack", "post-config"),
     ("stack", "extra"), ("stack", "test-config")],
], ids=["post-config", "stack.sh"])  # fmt: skip
def test_replace_does_not_echo_nova_secrets(tmp_path, phases):
    # stack.sh runs with xtrace on and keeps its output in a log file: the
    # passwords copied from nova.conf (Placement's service user, the API
    # database's, the broker's) must not show in it.
    run = ok(
        run_devstack(
            tmp_path,
            *phases,
            local_conf=f"set -o xtrace\n{NOVA_SERVICES}\n{REPLACE}",
            nova_conf=NOVA_CONF,
        )
    )
    output = run.stdout + run.stderr
    # The trace is on, and the secrets did reach nova-sched.conf.
    assert "+ iniset" in output and "nova-sched-manage" in output
    written = run.inisets("stack post-config")
    assert written[("placement", "password")] == PLACEMENT_PASSWORD
    for secret in ("Secret9", "novadbsecret", "novarabbit"):
        assert secret not in output


def test_replace_extra_starts_nova_sched_and_never_nova_scheduler(tmp_path):
    run = ok(
        run_devstack(
            tmp_path,
            ("stack", "extra"),
            local_conf=f"{NOVA_SERVICES}\n{REPLACE}",
            nova_conf=NOVA_CONF,
        )
    )
    assert run.effects("stack extra") == [
        ("echo_summary", "Starting nova-sched"),
        ("run_process", "nova-sched", f"{run.bin_dir}/nova-sched --config-file {run.conf}"),
    ]


@pytest.mark.parametrize("phase", [("stack", "pre-install"), ("unstack",)], ids=" ".join)
def test_replace_stops_a_nova_scheduler_left_running(tmp_path, phase):
    # An earlier stack.sh without the setting started devstack@n-sch;
    # stop_process skips it now that settings disabled n-sch.
    run = ok(
        run_devstack(
            tmp_path,
            phase,
            local_conf=f"{NOVA_SERVICES}\n{REPLACE}\n"
            "FAKE_ENABLED_UNITS=devstack@nova-sched.service,devstack@n-sch.service",
        )
    )
    effects = run.effects(" ".join(phase))
    assert [c for c in effects if c[0] == "systemctl"] == [
        ("systemctl", "stop", "devstack@n-sch.service"),
        ("systemctl", "disable", "devstack@n-sch.service"),
    ]
    if phase == ("unstack",):
        assert ("stop_process", "nova-sched") in effects


@pytest.mark.parametrize("phase", [("stack", "pre-install"), ("unstack",)], ids=" ".join)
def test_replace_without_a_nova_scheduler_unit_stops_nothing_more(tmp_path, phase):
    run = ok(run_devstack(tmp_path, phase, local_conf=f"{NOVA_SERVICES}\n{REPLACE}"))
    name = " ".join(phase)
    assert run.calls(name, "systemctl-query") == [
        ("systemctl-query", "is-enabled", "devstack@n-sch.service")
    ]
    assert run.calls(name, "systemctl") == []


def test_replace_refuses_fake_computes(tmp_path):
    # The fake computes report to nova-sched's own host list, which nova's
    # cells replace in this mode.
    run = run_devstack(
        tmp_path,
        ("stack", "pre-install"),
        ("stack", "install"),
        local_conf=f"{REPLACE}\nNOVA_SCHED_FAKE_COMPUTES=2",
    )
    assert run.returncode != 0
    assert "NOVA_SCHED_FAKE_COMPUTES" in run.stderr
    assert "stack install" not in run.phases


def test_without_replace_nothing_reads_nova_conf_or_touches_nova_scheduler(tmp_path):
    phases = [
        ("stack", "pre-install"),
        ("stack", "install"),
        ("stack", "post-config"),
        ("stack", "extra"),
        ("stack", "test-config"),
        ("unstack",),
    ]
    run = ok(
        run_devstack(
            tmp_path,
            *phases,
            local_conf=f"{NOVA_SERVICES}\nFAKE_ENABLED_UNITS=devstack@n-sch.service",
            nova_conf=NOVA_CONF,
        )
    )
    assert run.inisets("stack post-config") == _own_settings(run)
    for phase in phases:
        name = " ".join(phase)
        assert run.calls(name, "systemctl-query") == []
        assert run.calls(name, "systemctl") == []
        assert run.calls(name, "configure_placement_nova_compute") == []
