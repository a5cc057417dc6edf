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

    if [[ "$NOVA_SCHED_REPLACE_NOVA_SCHEDULER" == "True" ]]; then
        _configure_nova_sched_from_nova
    fi

    setup_logging "$NOVA_SCHED_CONF"
}

# The options set in one section of an INI file, one "option<TAB>value"
# line each, in file order. Unlike devstack's iniget, values come out
# exactly as written: iniget echoes them unquoted, which squeezes blanks
# and expands glob characters (a password such as "a*b").
function _nova_sched_ini_section {
    local file=$1 section=$2
    [[ -f "$file" ]] || return 0
    sed -ne "/^\[$section\][[:space:]]*\$/,/^\[.*\]/ s/^\([^][#;[:space:]][^=[:space:]]*\)[[:space:]]*=[[:space:]]*/\1\t/p" \
        "$file"
}

# One option's value in an INI file (the last one set, as oslo.config
# reads it); empty when it is not set.
function _nova_sched_ini_get {
    local file=$1 section=$2 option=$3 key value found=""
    while IFS=$'\t' read -r key value; do
        if [[ "$key" == "$option" ]]; then
            found=$value
        fi
    done < <(_nova_sched_ini_section "$file" "$section")
    printf '%s' "$found"
}

# _configure_nova_sched_from_nova: nova-sched in place of nova-scheduler.
# Hosts come from nova's cells and claims go to nova's Placement, reached
# as $NOVA_CONF reaches them; nova-sched's own database keeps its own
# tables. Where nova.conf does not hold a value (nova's API services run on
# another node), devstack's own value for the same thing is used.
function _configure_nova_sched_from_nova {
    local nova_conf=${NOVA_CONF:-/etc/nova/nova.conf}
    local option value transport api_db placement_options=0

    # The values copied hold nova's passwords (broker, API database,
    # Placement's service user): keep them out of stack.sh's trace.
    local xtrace
    xtrace=$(set +o | grep xtrace)
    set +o xtrace

    # Nova's conductor calls the scheduler on nova's broker and exchange.
    # iniset_rpc_backend (configure_nova_sched) already gave the broker's
    # other options; nova's transport_url may name a vhost of its own.
    transport=$(_nova_sched_ini_get "$nova_conf" DEFAULT transport_url)
    if [[ -n "$transport" ]]; then
        iniset "$NOVA_SCHED_CONF" DEFAULT transport_url "$transport"
    fi
    iniset "$NOVA_SCHED_CONF" DEFAULT control_exchange nova

    iniset "$NOVA_SCHED_CONF" scheduler host_source nova_cells
    iniset "$NOVA_SCHED_CONF" scheduler claims placement

    # The cells are the API database's cell mappings ([scheduler] cell_uuid
    # is not used in this mode).
    api_db=$(_nova_sched_ini_get "$nova_conf" api_database connection)
    if [[ -z "$api_db" && -n "$DATABASE_TYPE" ]]; then
        api_db=$(database_connection_url "${NOVA_API_DB:-nova_api}")
    fi
    if [[ -z "$api_db" ]]; then
        die $LINENO "nova-sched: no [api_database] connection in $nova_conf" \
            "and no database service to derive nova's API database from"
    fi
    iniset "$NOVA_SCHED_CONF" nova_cells api_database_connection "$api_db"
    iniset "$NOVA_SCHED_CONF" nova_cells refresh_interval \
        "$NOVA_SCHED_NOVA_CELLS_REFRESH_INTERVAL"

    # nova's [placement] section as it is, whatever its auth plugin.
    while IFS=$'\t' read -r option value; do
        iniset "$NOVA_SCHED_CONF" placement "$option" "$value"
        placement_options=$((placement_options + 1))
    done < <(_nova_sched_ini_section "$nova_conf" placement)
    if [[ "$placement_options" == 0 ]]; then
        # stack.sh writes nova's [placement] only where n-cpu or n-sch
        # runs, and settings disabled n-sch: configure it as devstack
        # configures nova's.
        configure_placement_nova_compute "$NOVA_SCHED_CONF"
    fi

    $xtrace
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

# _nova_sched_stop_n_sch: nova's own scheduler, left running by an earlier
# stack.sh, must not consume the scheduler topic beside nova-sched. Settings
# disabled n-sch, so devstack's stop_process (which acts on enabled services
# only) would leave it running: stop its unit as stop_process does.
function _nova_sched_stop_n_sch {
    # $SYSTEMCTL holds a command and its options ("sudo systemctl").
    # shellcheck disable=SC2086
    if $SYSTEMCTL is-enabled devstack@n-sch.service >/dev/null 2>&1; then
        # shellcheck disable=SC2086
        $SYSTEMCTL stop devstack@n-sch.service
        # shellcheck disable=SC2086
        $SYSTEMCTL disable devstack@n-sch.service
    fi
}

# _nova_sched_check_settings: refuse settings that cannot work together.
function _nova_sched_check_settings {
    if [[ "$NOVA_SCHED_REPLACE_NOVA_SCHEDULER" == "True" &&
          "$NOVA_SCHED_FAKE_COMPUTES" != "0" ]]; then
        die $LINENO "nova-sched: NOVA_SCHED_FAKE_COMPUTES=$NOVA_SCHED_FAKE_COMPUTES" \
            "needs NOVA_SCHED_REPLACE_NOVA_SCHEDULER=False: in place of" \
            "nova-scheduler the hosts are nova's compute nodes"
    fi
}

# cleanup_nova_sched: remove configuration and state.
function cleanup_nova_sched {
    sudo rm -rf "$NOVA_SCHED_CONF_DIR" "$NOVA_SCHED_STATE_PATH"
}

if is_service_enabled "$NOVA_SCHED_SERVICE"; then
    NOVA_SCHED_BIN_DIR=${NOVA_SCHED_BIN_DIR:-$(get_python_exec_prefix)}

    if [[ "$1" == "stack" && "$2" == "pre-install" ]]; then
        _nova_sched_check_settings
        if [[ "$NOVA_SCHED_REPLACE_NOVA_SCHEDULER" == "True" ]]; then
            _nova_sched_stop_n_sch
        fi
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
        if [[ "$NOVA_SCHED_REPLACE_NOVA_SCHEDULER" == "True" ]]; then
            _nova_sched_stop_n_sch
        fi
    fi

    if [[ "$1" == "clean" ]]; then
        cleanup_nova_sched
    fi
fi

# Restore xtrace
$_XTRACE_NOVA_SCHED
