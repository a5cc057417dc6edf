#!/usr/bin/env bash
# Install what the cluster scenario tests (tests/functional/clusters.py)
# run their private clusters with, when it is missing: MariaDB's server
# with galera-4 and rsync (its state transfers), and haproxy in front of
# Galera. RabbitMQ's server comes from tools/ensure_rabbitmq.sh. Installs
# only; never starts, stops or configures the system's services: the tests
# run their own nodes on ports of their own. Quiet when all are there.
set -euo pipefail

missing=()
[ -x /usr/sbin/mariadbd ] || missing+=(mariadb-server)
[ -e /usr/lib/galera/libgalera_smm.so ] || missing+=(galera-4)
command -v rsync >/dev/null 2>&1 || missing+=(rsync)
{ command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ]; } || missing+=(haproxy)
if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo -n"
fi

echo "ensure_cluster_packages: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
