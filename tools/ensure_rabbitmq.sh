#!/usr/bin/env bash
# Make sure a RabbitMQ broker answers on 127.0.0.1:5672 (guest/guest).
#
# Quiet and quick when it already runs. Otherwise installs Debian's
# rabbitmq-server if it is missing (needs root), starts it detached and
# waits until it is up. Idempotent: run it as often as you like.
set -euo pipefail

HOST=127.0.0.1
PORT=${RABBITMQ_NODE_PORT:-5672}
STARTUP_TIMEOUT=${RABBITMQ_STARTUP_TIMEOUT:-90}

port_open() {
    timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$PORT" 2>/dev/null
}

say() { echo "ensure_rabbitmq: $*" >&2; }

if port_open; then
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo -n"
fi

if ! command -v rabbitmq-server >/dev/null 2>&1 && [ ! -x /usr/sbin/rabbitmq-server ]; then
    say "installing rabbitmq-server"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq rabbitmq-server >/dev/null
    # A node name that does not depend on the machine's host name resolving.
    if [ ! -e /etc/rabbitmq/rabbitmq-env.conf ]; then
        printf 'NODENAME=rabbit@localhost\n' | $SUDO tee /etc/rabbitmq/rabbitmq-env.conf >/dev/null
    fi
fi
PATH="$PATH:/usr/sbin:/usr/lib/rabbitmq/bin"

if port_open; then
    exit 0
fi

say "starting rabbitmq-server"
# Fails harmlessly when a node is already starting; await_startup decides.
$SUDO rabbitmq-server -detached >/dev/null 2>&1 || true

deadline=$((SECONDS + STARTUP_TIMEOUT))
# Right after -detached the node may not be registered yet, and
# await_startup exits 69 at once: retry with short sleeps.
until $SUDO rabbitmqctl -q await_startup >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
        say "RabbitMQ did not start within ${STARTUP_TIMEOUT}s"
        exit 1
    fi
    sleep 2
done

until port_open; do
    if [ "$SECONDS" -ge "$deadline" ]; then
        say "RabbitMQ started but $HOST:$PORT does not accept connections"
        exit 1
    fi
    sleep 1
done
say "RabbitMQ is up on $HOST:$PORT"
