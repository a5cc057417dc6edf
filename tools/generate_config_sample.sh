#!/bin/sh
# Regenerate etc/nova-sched.conf.sample from etc/oslo-config-generator/.
# The nova_sched namespace comes from the package's entry points, so the
# package must be installed (pip install -e .) in the Python that runs this.
set -eu
cd "$(dirname "$0")/.."
exec oslo-config-generator --config-file etc/oslo-config-generator/nova-sched.conf "$@"
