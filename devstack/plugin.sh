#!/bin/bash
#
# devstack plugin for nova-sched, the standalone scheduler service.
#
# Sourced by stack.sh, unstack.sh and clean.sh with the phase in $1/$2:
#   stack pre-install | install | post-config | extra | test-config,
#   unstack, clean.
# Defaults live in devstack/settings.

# Save trace setting
_XTRACE_NOVA_SCHED=$(set +o | grep xtrace)
set -o xtrace

# The DB driver extra of the package that matches devstack's database.
function _nova_sched_db_extra {
    case "$DATABASE_TYPE" in
        mysql) echo mysql ;;
        postgresql) echo postgresql ;;
        *) echo "" ;;
    esac
}

# install_nova_sched: pip install the plugin's checkout (editable).
function install_nova_sched {
    local extra
    extra=$(_nova_sched_db_extra)
    if [[ -n "$extra" ]]; then
        # Braces: "[extra]" is pip's extras syntax, not an array index.
        pip_install -e "${NOVA_SCHED_DIR}[$extra]"
    else
        pip_install -e "$NOVA_SCHED_DIR"
    fi
}

# configure_nova_sched: write $NOVA_SCHED_CONF and create the database.
function configure_nova_sched {
    sudo install -d -o "$STACK_USER" -m 755 "$NOVA_SCHED_CONF_DIR"
    install -d -m 755 "$NOVA_SCHED_STATE_PATH"
    rm -f "$NOVA_SCHED_CONF"
    touch "$NOVA_SCHED_CONF"
    chmod 640 "$NOVA_SCHED_CONF"

    iniset "$NOVA_SCHED_CONF" DEFAULT debug "$ENABLE_DEBUG_LOG_LEVEL"
    iniset "$NOVA_SCHED_CONF" DEFAULT state_path "$NOVA_SCHED_STATE_PATH"
    iniset_rpc_backend nova-sched "$NOVA_SCHED_CONF"

    if [[ -n "$DATABASE_TYPE" ]]; then
        recreate_database nova_sched
        iniset "$NOVA_SCHED_CONF" database connection \
            "$(database_connection_url nova_sched)"
    else
        # No database service on this node: the default SQLite file under
        # state_path.
        iniset "$NOVA_SCHED_CONF" database connection \
            "sqlite:///$NOVA_SCHED_STATE_PATH/nova_sched.sqlite"
    fi

    iniset "$NOVA_SCHED_CONF" scheduler driver "$NOVA_SCHED_DRIVER"
    iniset "$NOVA_SCHED_CONF" scheduler workers "$NOVA_SCHED_WORKERS"
    iniset "$NOVA_SCHED_CONF" scheduler max_attempts "$NOVA_SCHED_MAX_ATTEMPTS"
    iniset "$NOVA_SCHED_CONF" filter_scheduler enabled_filters \
        "$NOVA_SCHED_ENABLED_FILTERS"

    setup_logging "$NOVA_SCHED_CONF"
}

# init_nova_sched: create or upgrade the schema.
function init_nova_sched {
    "$NOVA_SCHED_BIN_DIR/nova-sched-manage" --config-file "$NOVA_SCHED_CONF" \
        db sync
}

# start_nova_sched: the daemon, then the simulated compute nodes.
function start_nova_sched {
    run_process "$NOVA_SCHED_SERVICE" \
        "$NOVA_SCHED_BIN_DIR/nova-sched --config-file $NOVA_SCHED_CONF"

    local i fail_builds=""
    if [[ "$NOVA_SCHED_FAKE_FAIL_BUILDS" != "0" ]]; then
        fail_builds="--fail-builds $NOVA_SCHED_FAKE_FAIL_BUILDS"
    fi
    for i in $(seq 1 "$NOVA_SCHED_FAKE_COMPUTES"); do
        run_process "$NOVA_SCHED_FAKE_SERVICE_PREFIX-$i" \
            "$NOVA_SCHED_BIN_DIR/nova-sched-fake-compute --config-file $NOVA_SCHED_CONF --host $NOVA_SCHED_FAKE_HOST_PREFIX-$i --vcpus $NOVA_SCHED_FAKE_VCPUS --memory-mb $NOVA_SCHED_FAKE_MEMORY_MB --local-gb $NOVA_SCHED_FAKE_LOCAL_GB $fail_builds"
    done
}

# stop_nova_sched: the simulated compute nodes, then the daemon.
function stop_nova_sched {
    local i
    for i in $(seq 1 "$NOVA_SCHED_FAKE_COMPUTES"); do
        stop_process "$NOVA_SCHED_FAKE_SERVICE_PREFIX-$i"
    done
    stop_process "$NOVA_SCHED_SERVICE"
}

# cleanup_nova_sched: remove configuration and state.
function cleanup_nova_sched {
    sudo rm -rf "$NOVA_SCHED_CONF_DIR" "$NOVA_SCHED_STATE_PATH"
}

if is_service_enabled "$NOVA_SCHED_SERVICE"; then
    NOVA_SCHED_BIN_DIR=${NOVA_SCHED_BIN_DIR:-$(get_python_exec_prefix)}

    if [[ "$1" == "stack" && "$2" == "pre-install" ]]; then
        :
    elif [[ "$1" == "stack" && "$2" == "install" ]]; then
        echo_summary "Installing nova-sched"
        install_nova_sched
    elif [[ "$1" == "stack" && "$2" == "post-config" ]]; then
        echo_summary "Configuring nova-sched"
        configure_nova_sched
        init_nova_sched
    elif [[ "$1" == "stack" && "$2" == "extra" ]]; then
        echo_summary "Starting nova-sched"
        start_nova_sched
    elif [[ "$1" == "stack" && "$2" == "test-config" ]]; then
        :
    fi

    if [[ "$1" == "unstack" ]]; then
        stop_nova_sched
    fi

    if [[ "$1" == "clean" ]]; then
        cleanup_nova_sched
    fi
fi

# Restore xtrace
$_XTRACE_NOVA_SCHED
