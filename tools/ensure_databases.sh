#!/usr/bin/env bash
# Start the PostgreSQL and MariaDB servers the backend tests use, when they
# are installed but stopped. Not installing them is deliberate: SQLite
# covers every test, and the server-backed ones skip with the reason when
# no server answers on 127.0.0.1. Quiet when both already run.
set -uo pipefail

port_open() {
    timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

say() { echo "ensure_databases: $*" >&2; }

wait_port() {
    local port=$1 name=$2
    for _ in $(seq 1 30); do
        port_open "$port" && return 0
        sleep 1
    done
    say "$name did not open port $port; its tests will be skipped"
}

if ! port_open 5432 && command -v pg_ctlcluster >/dev/null 2>&1; then
    for version_dir in /etc/postgresql/*; do
        # An unmatched glob stays literal: no cluster is configured.
        [ -e "$version_dir" ] || continue
        version=${version_dir##*/}
        say "starting PostgreSQL $version"
        pg_ctlcluster --skip-systemctl-redirect "$version" main start >/dev/null 2>&1 || true
    done
    wait_port 5432 PostgreSQL
fi

if ! port_open 3306 && [ -x /usr/sbin/mariadbd ]; then
    say "starting MariaDB"
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd \
        >/dev/null 2>&1 || true
    wait_port 3306 MariaDB
fi
exit 0
