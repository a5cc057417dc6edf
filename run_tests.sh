#!/usr/bin/env bash
# The one test command: installs what the tests need, makes sure RabbitMQ
# runs, then runs pytest over the whole tests/ tree and exits with its
# status. Works on a fresh Debian machine, as root, with CI=true and no
# standard input. Extra arguments go to pytest (e.g. ./run_tests.sh -x).
set -euo pipefail
cd "$(dirname "$0")"

export DEBIAN_FRONTEND=noninteractive
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PIP_NO_INPUT=1
export PIP_ROOT_USER_ACTION=ignore
# Debian's own python3 refuses pip installs without this (PEP 668).
export PIP_BREAK_SYSTEM_PACKAGES=1

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo -n"
fi

# Debian packages: only what is missing.
missing=()
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "run_tests: installing ${missing[*]}" >&2
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The package, its console scripts and the test extra (pytest, drivers).
python3 -m pip install -q -e '.[test]' </dev/null

# The functional suite talks to a real broker on 127.0.0.1:5672.
tools/ensure_rabbitmq.sh
# The PostgreSQL and MariaDB tests use the local servers when installed.
tools/ensure_databases.sh
# The cluster scenarios run private RabbitMQ and Galera clusters and an
# haproxy of their own (tests/functional/clusters.py).
tools/ensure_cluster_packages.sh
# Today's nova, in a venv of its own (it pins its own dependencies), for the
# test where nova's SchedulerAPI calls the daemon (tests/functional/
# test_nova_client.py), and with the Placement of the same release for the
# test cloud of nova (tests/functional/test_nova_cloud.py); made once, then
# reused.
export NOVA_SCHED_NOVA_VERSION="${NOVA_SCHED_NOVA_VERSION:-34.*}"
export NOVA_SCHED_PLACEMENT_VERSION="${NOVA_SCHED_PLACEMENT_VERSION:-16.*}"
export NOVA_SCHED_NOVA_VENV="${NOVA_SCHED_NOVA_VENV:-$HOME/.cache/nova-sched/nova-venv-${NOVA_SCHED_NOVA_VERSION//\*/x}}"
tools/nova_venv.sh "$NOVA_SCHED_NOVA_VERSION" "$NOVA_SCHED_NOVA_VENV" \
    "openstack-placement==$NOVA_SCHED_PLACEMENT_VERSION" PyMySQL

# The topic consumer and the publisher are tested with both ends of the
# releases pyproject.toml allows of oslo.messaging, kombu and amqp: the
# newest are what the run below has installed; the oldest (each one's lower
# bound) get a venv of their own, made again whenever pyproject.toml
# changes, where their tests run first.
oldest_pins=$(python3 -c 'import re; print(" ".join("%s==%s" % m for m in re.findall(
    r"\"(oslo\.messaging|kombu|amqp)>=([0-9.]+)", open("pyproject.toml").read())))')
OLDEST_VENV="$HOME/.cache/nova-sched/oldest-messaging-venv"
oldest_key="$oldest_pins $(sha1sum pyproject.toml | cut -c1-16)"
if [ "$(cat "$OLDEST_VENV/.made-for" 2>/dev/null)" != "$oldest_key" ]; then
    echo "run_tests: making $OLDEST_VENV ($oldest_pins)" >&2
    rm -rf "$OLDEST_VENV"
    python3 -m venv "$OLDEST_VENV"
    # shellcheck disable=SC2086  # the pins are separate words
    "$OLDEST_VENV/bin/python" -m pip install -q $oldest_pins -e . pytest </dev/null
    echo "$oldest_key" > "$OLDEST_VENV/.made-for"
fi
# This checkout, wherever it is (the venv may have been made from another).
"$OLDEST_VENV/bin/python" -m pip install -q --no-deps -e . </dev/null
echo "run_tests: the topic consumer and the publisher with $oldest_pins" >&2
"$OLDEST_VENV/bin/python" -m pytest -q -p no:cacheprovider \
    tests/unit/scheduler/test_topic_consumer.py \
    tests/unit/scheduler/test_pyamqp_adapter.py tests/functional/test_topic_consumer.py \
    tests/unit/scheduler/test_publisher.py tests/functional/test_publisher_confirms.py \
    tests/unit/scheduler/test_amqp_frames.py

exec python3 -m pytest -q "$@"
